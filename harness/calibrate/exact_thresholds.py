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

from collections.abc import Iterable
from dataclasses import replace

from harness.calibrate.cell_thresholds import RowThreshold, row_thresholds
from harness.calibrate.exact_judge import EXACT_PREFIX, why_not_in_tier
from harness.calibrate.reduction_order import (
    differing_quantities,
    reduction_order_perturbation,
    reduction_order_reference,
)
from harness.calibrate.thresholds import DECADES, Threshold, smallest_failing_error
from harness.golden.reference import Perturbation, ReferenceInputs, train_reference
from harness.plan.cell import Cell
from harness.plan.matrix import Matrix
from harness.tasks import get_task


def exact_thresholds(in_force: Iterable[Threshold], matrix: Matrix, env_name: str) -> list[RowThreshold]:
    """Each row of `in_force` (harness.calibrate.study) again, as `run --exact` judges its cells."""
    # (task, precision, the member's reduction-order semantics) -> its threshold: cells that compute
    # alike (zero2 and zero3, say) are simulated once
    member_thresholds: dict[tuple[str, str, Perturbation], tuple[float | None, str]] = {}

    def exact(cell: Cell, row: Threshold) -> tuple[float | None, str] | None:
        if why_not_in_tier(cell):
            return None
        key = (row.task, row.precision, reduction_order_perturbation(cell))
        if key not in member_thresholds:
            member_thresholds[key] = member_threshold(cell, row.task)
        return member_thresholds[key]

    return row_thresholds(in_force, matrix, env_name, exact, "its tolerance: outside the tier")


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
