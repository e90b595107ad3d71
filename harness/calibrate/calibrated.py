"""Tolerances from the measured noise: the worst benign need times a stated safety factor.

Two granularities. Per family (precision x family x kind, over every task): the shape of
matrix.toml's [tolerances] table today. Per task (task x precision x family x kind): what a
task's own noise allows, far tighter for the tasks whose quantities barely move (the detection
thresholds show what that buys). The rtol in force is kept: calibration sizes the atol.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from harness.calibrate.noise import Need
from harness.plan.tolerances import QUANTITY_KINDS, Tolerance, ToleranceTable

# The project's margin over the worst benign need (matrix.toml's reasons say "2x the worst need").
SAFETY_FACTOR = 2.0

Key = tuple[str, str, str]  # precision, family, kind


@dataclass(frozen=True)
class Proposal:
    precision: str
    family: str
    kind: str
    need: Need  # the worst benign need behind it
    atol: float  # SAFETY_FACTOR x need
    in_force: float  # matrix.toml's atol for the same entry and kind

    @property
    def in_force_over_proposed(self) -> float:
        return self.in_force / self.atol if self.atol else float("inf")


def family_proposals(needs: Iterable[Need], table: ToleranceTable,
                     safety: float = SAFETY_FACTOR) -> list[Proposal]:
    worst: dict[Key, Need] = {}
    for need in needs:
        key = (need.precision, need.family, need.kind)
        if key not in worst or need.atol > worst[key].atol:
            worst[key] = need
    return [Proposal(p, f, k, need, safety * need.atol, table.entries[(p, f)].for_quantity(k).atol)
            for (p, f, k), need in sorted(worst.items())]


def task_tolerances(needs: Iterable[Need], table: ToleranceTable,
                    safety: float = SAFETY_FACTOR) -> dict[tuple[str, str, str], Tolerance]:
    """(task, precision, family) -> a Tolerance whose kinds carry safety x that task's worst need."""
    worst: dict[tuple[str, str, str, str], float] = {}
    for need in needs:
        key = (need.task, need.precision, need.family, need.kind)
        worst[key] = max(worst.get(key, 0.0), need.atol)
    out: dict[tuple[str, str, str], Tolerance] = {}
    for task, precision, family in sorted({k[:3] for k in worst}):
        entry = table.entries[(precision, family)]
        kinds: Mapping[str, Tolerance] = {
            kind: Tolerance(precision, family, entry.for_quantity(kind).rtol,
                            safety * worst.get((task, precision, family, kind), 0.0),
                            f"calibrated for {task}: {safety:g} x its worst benign need")
            for kind in QUANTITY_KINDS}
        out[(task, precision, family)] = Tolerance(precision, family, entry.rtol, kinds["eval"].atol,
                                                   f"calibrated for {task}", kinds)
    return out
