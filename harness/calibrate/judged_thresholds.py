"""Detection thresholds as every `python -m harness run` judges a row's passing CPU cells: the
golden comparison at the tolerance in force, and for a cell the own-semantics check judges
(harness.calibrate.semantics_judge) its final weights against its own-semantics reference too.

The check compares a cell with the reference that computes as its backend does; a correct cell
reproduces it within the check's tolerance (bit for bit on every CPU measured), so the cell with
every gradient x (1 + e) is that reference with the error, and the check fails it once a final
weight moves further than the entry's atol. A cell fails when either comparison does, so its
threshold is the smaller of the two: the check's, or the row's golden figure in force (the
family's weakest backend's, an upper bound of the cell's own). A cell the check does not judge
keeps the row's figure; a row takes its weakest passing cell's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from harness.calibrate.cell_thresholds import RowThreshold, row_thresholds
from harness.calibrate.reduction_order import reduction_order_perturbation, reduction_order_reference
from harness.calibrate.semantics_judge import semantics_comparisons, semantics_entry
from harness.calibrate.thresholds import Threshold, smallest_failing_error
from harness.golden.reference import Perturbation, ReferenceInputs, train_reference
from harness.plan.cell import Cell
from harness.plan.matrix import Matrix
from harness.plan.semantics_tolerances import SemanticsTolerance
from harness.tasks import get_task


def judged_thresholds(in_force: Iterable[Threshold], matrix: Matrix, env_name: str) -> list[RowThreshold]:
    """Each row of `in_force` (harness.calibrate.study) again, as `run` judges its cells."""
    checked: dict[tuple[str, str, Perturbation], tuple[float | None, str]] = {}

    def judged(cell: Cell, row: Threshold) -> tuple[float | None, str] | None:
        entry, _ = semantics_entry(cell, matrix.tolerances)
        if entry is None:
            return None
        key = (row.task, row.precision, reduction_order_perturbation(cell))
        if key not in checked:
            checked[key] = semantics_threshold(cell, entry)
        error, caught_by = checked[key]
        if error is None or (row.error is not None and row.error < error):
            return row.error, f"{row.caught_by} (the golden comparison)"
        return error, caught_by

    return row_thresholds(in_force, matrix, env_name, judged, "the golden comparison alone")


def semantics_threshold(cell: Cell, entry: SemanticsTolerance) -> tuple[float | None, str]:
    """The smallest e at which the cell's own-semantics reference with every gradient x (1 + e)
    leaves the check's tolerance around the unperturbed one, and the weight that leaves first."""
    task = get_task(entry.task)
    inputs = ReferenceInputs.of(task)
    semantics = reduction_order_perturbation(cell)
    unperturbed = reduction_order_reference(cell, entry.task)

    def fails(error: float) -> str | None:
        bug = replace(semantics, gradient_scale=1.0 + error,
                      name=f"{semantics.name}, gradients x (1 + {error:g})")
        record = train_reference(task, cell.precision, inputs=inputs, perturbation=bug)
        failing = [c for c in semantics_comparisons(record, unperturbed, entry) if not c.ok]
        return max(failing, key=lambda c: c.tolerance_used).quantity if failing else None

    return smallest_failing_error(fails)
