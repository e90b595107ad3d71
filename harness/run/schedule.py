"""Scheduling a run: which requested cells launch, in which launch group, and in what order.

A cell whose task the harness cannot build is an error and one that cannot run here is skipped,
both without a launch to pay for. The rest share a launch per shape (`launch_group_key`), with
the cells declared to fail last in their group, those declared to raise, crash or time out after
those declared to diverge (each of the former ends its launch);
resume cells go to harness.run.resume_launches (a source launch, then a destination one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.judge.cell_verdict import new_result
from harness.judge.outcome import Status
from harness.plan.availability import Host, check
from harness.plan.cell import CORE, Cell, ResumeCell
from harness.run.context import RunContext


def launch_group_key(cell: Cell) -> str:
    """Cells with the same key run in one launch: same device kind and number of processes, and
    the same implementation (another library's process-wide state never meets the core's)."""
    shape = f"{cell.device}{cell.processes}"
    return shape if cell.implementation == CORE else f"{shape}-{cell.implementation}"


@dataclass
class Schedule:
    groups: dict[str, list[Cell]] = field(default_factory=dict)  # launch group key -> its cells
    resume_cells: list[ResumeCell] = field(default_factory=list)

    @property
    def cpu_groups(self) -> list[tuple[str, list[Cell]]]:
        """CPU groups: run side by side (each launch's processes take their own cores)."""
        return [(k, g) for k, g in self.groups.items() if g[0].device == "cpu"]

    @property
    def device_groups(self) -> list[tuple[str, list[Cell]]]:
        """GPU groups: one after another (they would share devices)."""
        return [(k, g) for k, g in self.groups.items() if g[0].device != "cpu"]


def schedule(run: RunContext, cells: list[Cell], host: Host) -> Schedule:
    """Finish the cells that need no launch (their results go to `run`) and group the rest."""
    plan = Schedule()
    for cell in cells:
        unknown = _unknown_task(cell)
        if unknown:  # the harness cannot build it: not judged, and no launch to pay for
            run.finish(cell, new_result(cell, Status.ERROR, unknown))
            continue
        verdict = check(cell, host)
        if not verdict.runnable:
            run.finish(
                cell, new_result(cell, Status.SKIPPED, verdict.reason, extra={"reason_code": verdict.code})
            )
            continue
        run.emulated[cell.id] = verdict.emulated
        if isinstance(cell, ResumeCell):
            plan.resume_cells.append(cell)
            continue
        plan.groups.setdefault(launch_group_key(cell), []).append(cell)
    for key, group in plan.groups.items():  # stable: the selection's order otherwise
        plan.groups[key] = sorted(group, key=lambda c: _place_in_launch(run, c))
    return plan


# A declared divergence ("failed") leaves its launch running; an exception, crash or timeout
# ends it, and the cells after it need a new launch (seconds of start-up each).
_ENDS_ITS_LAUNCH = ("exception", "crashed", "timeout")


def _place_in_launch(run: RunContext, cell: Cell) -> int:
    """0: expected to pass; 1: declared to diverge; 2: declared to end its launch. So the cells
    declared to end a launch come last, and each costs a launch of its own at most."""
    expected = run.matrix.expected_outcome(cell, run.options.env_name)
    if expected is None:
        return 0
    return 2 if expected.status in _ENDS_ITS_LAUNCH else 1


def _unknown_task(cell: Cell) -> str:
    from harness.tasks import get_task

    try:
        get_task(cell.task)
    except KeyError as exc:
        return str(exc.args[0])
    return ""
