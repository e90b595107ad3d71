"""Detection thresholds under `python -m harness run --exact`: the smallest uniform gradient error
(every gradient x (1 + e) before each optimizer step) that fails a family's passing CPU cells when
the exact tier judges them too (harness.calibrate.exact_judge).

A cell of the tier fails unless every quantity of its record is bit-identical to its
reduction-order reference, and a passing member *is* that reference, bit for bit: that is what
membership means, measured on every CPU the tier was measured on (docs/calibration.md, section 4).
So the member with the bug is the reference run with the same gradient error, and it fails once
any quantity differs from the unperturbed reference's bits. A passing cell outside the tier keeps
its tolerance comparison alone: it is given the row's threshold in force, as the family's
backends compute it (harness.calibrate.variants.cell_semantics; such a cell is not simulated on
its own, e.g. a synchronised-BatchNorm cell gets its task's golden-loop figure). A row's threshold
is its weakest passing cell's; a row whose cells are all declared failures (matrix.toml
[[expected]]) has no passing cell to catch anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace

from harness.calibrate.exact_judge import EXACT_PREFIX, why_not_in_tier
from harness.calibrate.reduction_order import (
    differing_quantities,
    reduction_order_perturbation,
    reduction_order_reference,
)
from harness.calibrate.thresholds import DECADES, GOALS, Threshold, smallest_failing_error
from harness.golden.reference import Perturbation, ReferenceInputs, train_reference
from harness.judge.cell_verdict import golden_task_of
from harness.plan.cell import CORE, Cell
from harness.plan.matrix import Matrix
from harness.plan.tolerances import FAMILIES
from harness.tasks import get_task


@dataclass(frozen=True)
class ExactThreshold:
    task: str
    precision: str
    family: str
    error: float | None  # None: not caught at e = 1, or no passing cell (`passing` == 0)
    weakest: str  # the passing cell that sets it
    caught_by: str  # the first quantity that fails there ("exact:<quantity>" for a member), or why none
    members: int  # passing cells judged exactly
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


def passing_cpu_cells(matrix: Matrix, env_name: str, task: str, precision: str, family: str) -> list[Cell]:
    """The core's CPU cells of `env_name` whose golden is `task`'s at `precision`, in `family`, less
    the cells it declares failing (they never pass, so they catch nothing)."""
    return [cell for cell in matrix.cells
            if cell.device == "cpu" and cell.implementation == CORE and cell.precision == precision
            and FAMILIES[cell.strategy] == family and golden_task_of(cell.task) == task
            and matrix.expected_outcome(cell, env_name) is None]


def exact_thresholds(in_force: Iterable[Threshold], matrix: Matrix, env_name: str) -> list[ExactThreshold]:
    """Each row of `in_force` (harness.calibrate.study) again, as `run --exact` judges its cells."""
    # (task, precision, the member's reduction-order semantics) -> its threshold: cells that compute
    # alike (zero2 and zero3, say) are simulated once
    member_thresholds: dict[tuple[str, str, Perturbation], tuple[float | None, str]] = {}
    out = []
    for row in in_force:
        cells = passing_cpu_cells(matrix, env_name, row.task, row.precision, row.family)
        found: list[tuple[float | None, str, str]] = []  # (error, cell id, caught by)
        members = 0
        for cell in cells:
            if why_not_in_tier(cell):
                found.append((row.error, cell.id, f"{row.caught_by} (its tolerance: outside the tier)"))
                continue
            members += 1
            key = (row.task, row.precision, reduction_order_perturbation(cell))
            if key not in member_thresholds:
                member_thresholds[key] = member_threshold(cell, row.task)
            error, caught_by = member_thresholds[key]
            found.append((error, cell.id, caught_by))
        if not found:
            out.append(ExactThreshold(row.task, row.precision, row.family, None, "",
                                      "none: every cell of this row is a declared failure", 0, 0))
            continue
        error, weakest, caught_by = max(found, key=lambda f: math.inf if f[0] is None else f[0])
        out.append(ExactThreshold(row.task, row.precision, row.family, error, weakest, caught_by, members,
                                  len(cells)))
    return out


def member_threshold(cell: Cell, task_name: str) -> tuple[float | None, str]:
    """The smallest e at which the cell's reduction-order reference with every gradient x (1 + e)
    is no longer bit-identical to the unperturbed one, and the quantity that moved the most; the
    smallest e tried (DECADES[0], 1e-7) where that already fails: an upper bound, since an error
    below fp32's half ulp of 1 (6e-8) is no error (the multiplier rounds to 1)."""
    task = get_task(task_name)
    inputs = ReferenceInputs.of(task)
    semantics = reduction_order_perturbation(cell)
    unperturbed = reduction_order_reference(cell, task_name)

    def fails(error: float) -> str | None:
        bug = replace(semantics, gradient_scale=1.0 + error,
                      name=f"{semantics.name}, gradients x (1 + {error:g})")
        record = train_reference(task, cell.precision, inputs=inputs, perturbation=bug)
        differing = differing_quantities(record, unperturbed)
        if not differing:
            return None
        return EXACT_PREFIX + max(differing.items(), key=lambda item: item[1][1])[0]

    smallest = fails(DECADES[0])
    if smallest is not None:  # bisecting below it would only find where 1 + e rounds to 1 in fp32
        return DECADES[0], smallest
    return smallest_failing_error(fails)


def exact_json(threshold: ExactThreshold) -> dict[str, object]:
    return {**asdict(threshold), "goal": threshold.goal, "meets_goal": threshold.meets_goal,
            "at_most": threshold.at_most}
