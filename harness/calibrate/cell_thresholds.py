"""A detection-threshold row as `python -m harness run` judges the row's passing CPU cells: each
cell's own threshold (a sharper check, where one judges the cell, else the row's figure in force),
the row's being its weakest passing cell's. Shared by the thresholds under the own-semantics check
(harness.calibrate.judged_thresholds, every run) and under the exact tier
(harness.calibrate.exact_thresholds, `run --exact`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from harness.calibrate.thresholds import DECADES, GOALS, Threshold
from harness.judge.cell_verdict import golden_task_of
from harness.plan.cell import CORE, Cell
from harness.plan.matrix import Matrix
from harness.plan.tolerances import FAMILIES

# A cell's threshold under the sharper check (error, the quantity that fails first), or None:
# the check does not judge that cell, which keeps the row's figure in force
CellThreshold = Callable[[Cell, Threshold], "tuple[float | None, str] | None"]


@dataclass(frozen=True)
class RowThreshold:
    task: str
    precision: str
    family: str
    error: float | None  # None: not caught at e = 1, or no passing cell (`passing` == 0)
    weakest: str  # the passing cell that sets it
    caught_by: str  # the first quantity that fails there, or why none
    members: int  # passing cells the sharper check judges
    passing: int  # passing cells (the row's CPU cells less its declared failures)

    @property
    def goal(self) -> float:
        return GOALS[self.precision]

    @property
    def at_most(self) -> bool:
        """Caught at the smallest e tried: the threshold is an upper bound."""
        return self.error is not None and self.error <= DECADES[0]

    @property
    def meets_goal(self) -> bool:
        return self.error is not None and self.error <= self.goal


def cpu_environment(matrix: Matrix) -> str:
    """The environment whose CI job runs every family's core CPU cells (deepspeed installed); ""
    for a matrix without one (then only the declarations that name no environment apply)."""
    for name, env in matrix.environments.items():
        if env.device == "cpu" and env.deepspeed and env.implementation == CORE and not env.sweep:
            return name
    return ""


def row_cpu_cells(matrix: Matrix, task: str, precision: str, family: str) -> list[Cell]:
    """The core's CPU cells whose golden is `task`'s at `precision`, in `family`."""
    return [cell for cell in matrix.cells
            if cell.device == "cpu" and cell.implementation == CORE and cell.precision == precision
            and FAMILIES[cell.strategy] == family and golden_task_of(cell.task) == task]


def passing_cpu_cells(matrix: Matrix, env_name: str, task: str, precision: str, family: str) -> list[Cell]:
    """The core's CPU cells of `env_name` whose golden is `task`'s at `precision`, in `family`, less
    the cells it declares failing (they never pass, so they catch nothing)."""
    return [cell for cell in row_cpu_cells(matrix, task, precision, family)
            if matrix.expected_outcome(cell, env_name) is None]


def row_thresholds(in_force: Iterable[Threshold], matrix: Matrix, env_name: str, sharper: CellThreshold,
                   outside: str) -> list[RowThreshold]:
    """Each row of `in_force` again, cell by cell: `sharper` for the cells it judges, the row's
    figure (with `outside` saying why) for the others; a row without a passing cell has none."""
    out = []
    for row in in_force:
        cells = passing_cpu_cells(matrix, env_name, row.task, row.precision, row.family)
        found: list[tuple[float | None, str, str]] = []  # (error, cell id, caught by)
        members = 0
        for cell in cells:
            judged = sharper(cell, row)
            if judged is None:
                found.append((row.error, cell.id, f"{row.caught_by} ({outside})"))
                continue
            members += 1
            found.append((judged[0], cell.id, judged[1]))
        if not found:
            why = ("every cell of this row is a declared failure"
                   if row_cpu_cells(matrix, row.task, row.precision, row.family)
                   else "the matrix has no CPU cell of this row")
            out.append(RowThreshold(row.task, row.precision, row.family, None, "", f"none: {why}", 0, 0))
            continue
        error, weakest, caught_by = max(found, key=lambda f: math.inf if f[0] is None else f[0])
        out.append(RowThreshold(row.task, row.precision, row.family, error, weakest, caught_by, members,
                                len(cells)))
    return out


def row_json(threshold: RowThreshold) -> dict[str, object]:
    return {**asdict(threshold), "goal": threshold.goal, "meets_goal": threshold.meets_goal,
            "at_most": threshold.at_most}
