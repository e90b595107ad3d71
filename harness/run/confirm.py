"""Confirming a cell judged wrong by running it again in a fresh launch.

A cell shares its launch with the cells of its shape, so its result could in principle be left
behind by one run before it (a patched global, a reseeded RNG, a cached kernel): DeepSpeed's
`memory_efficient_linear` did exactly that. Every unexpected judged failure is therefore rerun:

1. once, in one fresh launch holding only this group's failing cells (the first of them runs
   alone: nothing ran before it in that process). A rerun whose record is bit-identical to the
   first run's, after other cells than the first time, confirms that the failure is the cell's
   own, and costs one launch per group however many cells failed;
2. then alone, each in its own launch (`--isolate` semantics), any cell whose rerun did not
   reproduce the first run exactly.

The cell's result keeps its first run's status and says what the rerun found (`CellResult.rerun`:
its status, whether it ran alone, agreed, and had a bit-identical record). Its records go to
the report dir's reruns (ReportDir.rerun_records), its launches to `<shape>-rerun-NNN` and
`-alone-NNN` launch directories.
"""

from __future__ import annotations

from pathlib import Path

from harness.judge.cell_verdict import cross_environment
from harness.judge.outcome import CellResult, Rerun, Status
from harness.layout.report_dir import ReportDir
from harness.plan.cell import Cell
from harness.record.record_format import Record
from harness.run.context import RunContext
from harness.run.judging import judging
from harness.run.launch_loop import launch_cells


def confirm_failures(run: RunContext, key: str, cells: list[Cell]) -> None:
    """Rerun `cells` (unexpected judged failures of one launch shape) and attach what the rerun
    found to their results."""
    records_dir = run.layout.rerun_records
    ReportDir.forget_records(records_dir, [cell.id for cell in cells])  # never judge a stale rerun record
    by_id = {c.id: c for c in cells}
    found: dict[str, CellResult] = {}
    alone: set[str] = set()
    launch_of: dict[str, str] = {}

    def keep(cell: Cell, result: CellResult) -> None:
        found[cell.id] = result

    def heard(batch: list[Cell], run_dir: Path) -> None:
        alone.add(batch[0].id)
        launch_of.update({c.id: str(run_dir) for c in batch})

    judged = judging(run, by_id, records_dir, keep)
    launch_cells(run, key, cells, records_dir, judged, keep, label="-rerun", on_launch=heard)
    again = [c for c in cells if c.id in found and c.id not in alone
             and not _agrees(run, c, found[c.id], records_dir)[1]]
    for cell in again:  # a record that moved with its neighbours: settle it alone
        found.pop(cell.id)
    if again and not run.stopping:
        launch_cells(run, key, again, records_dir, judged, keep, label="-alone", on_launch=heard,
                     one_per_launch=True)
    for cell in cells:
        if cell.id in found and cell.id in run.results and not run.stopping:
            agreed, identical = _agrees(run, cell, found[cell.id], records_dir)
            result = run.results[cell.id]
            result.rerun = Rerun(status=found[cell.id].status, alone=cell.id in alone, agreed=agreed,
                                 identical=identical, reason=found[cell.id].reason,
                                 launch_dir=launch_of.get(cell.id, ""))
            result.reason = f"{result.reason} [{result.rerun.summary()}]"


def _agrees(run: RunContext, cell: Cell, rerun: CellResult, records_dir: Path) -> tuple[bool, bool]:
    """(the rerun failed the same way, and its record is also bit-identical to the first run's)."""
    first = run.results[cell.id]
    agreed = rerun.status == Status.FAILED and rerun.failure == first.failure
    try:
        record = Record.load(run.records_dir / cell.id)
    except Exception:  # the first run's record went missing: nothing to compare bit for bit
        return agreed, False
    identical, _ = cross_environment(record, records_dir / cell.id)
    return agreed, identical.ok and agreed
