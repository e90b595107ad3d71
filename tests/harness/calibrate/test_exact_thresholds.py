"""Detection thresholds under `run --exact` (harness.calibrate.exact_thresholds): a member of the
exact tier with every gradient x (1 + e) is its reference with that error, caught once a bit
moves; a cell outside the tier keeps its tolerance's threshold; a row of declared failures catches
nothing. Figures are asserted by their relations: nothing assumes which bits this CPU computes."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from harness.calibrate.cell_thresholds import cpu_environment, passing_cpu_cells
from harness.calibrate.exact_judge import why_not_in_tier
from harness.calibrate.exact_thresholds import exact_thresholds, member_threshold
from harness.calibrate.reduction_order import reduction_order_perturbation, reduction_order_reference
from harness.calibrate.thresholds import DECADES, Threshold
from harness.golden.reference import ReferenceInputs, train_reference
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.record.record_format import Record
from harness.tasks import get_task

pytestmark = pytest.mark.goldens


def _bit_identical(a: Record, b: Record) -> bool:
    mine, theirs = a.tensors(), b.tensors()
    return mine.keys() == theirs.keys() and all(
        mine[k].dtype == theirs[k].dtype and torch.equal(mine[k], theirs[k]) for k in theirs)


def _with_error(cell: Cell, error: float) -> Record:
    task = get_task("regression")
    bug = replace(reduction_order_perturbation(cell), gradient_scale=1.0 + error)
    return train_reference(task, cell.precision, inputs=ReferenceInputs.of(task), perturbation=bug)


def test_a_members_threshold_is_where_its_reference_stops_being_bit_identical() -> None:
    cell = Cell.from_id("regression-cpu2-zero3-bf16")
    assert not why_not_in_tier(cell)
    error, caught_by = member_threshold(cell, "regression")
    assert error is not None and caught_by.startswith("exact:")
    unperturbed = reduction_order_reference(cell, "regression")
    assert _bit_identical(_with_error(cell, 0.0), unperturbed)  # no error, no difference
    assert not _bit_identical(_with_error(cell, error), unperturbed)
    if error > DECADES[0]:  # bisected: a slightly smaller error leaves every bit in place
        assert _bit_identical(_with_error(cell, error / 1.2), unperturbed)


def test_a_row_takes_its_weakest_passing_cell_and_a_cell_outside_the_tier_keeps_its_tolerance() -> None:
    matrix = load_matrix()
    in_force = Threshold("sgd_accum", "fp32", "plain", 3.8e-5, "eval/logits", False)
    [row] = exact_thresholds([in_force], matrix, cpu_environment(matrix))
    cells = passing_cpu_cells(matrix, cpu_environment(matrix), "sgd_accum", "fp32", "plain")
    outside = [c.id for c in cells if why_not_in_tier(c)]
    assert outside and row.members == len(cells) - len(outside) and row.passing == len(cells)
    assert row.error == in_force.error and row.weakest in outside  # the member was caught below it
    assert "outside the tier" in row.caught_by


def test_a_row_whose_cells_are_all_declared_failures_has_no_cell_to_catch_anything() -> None:
    matrix = load_matrix()
    env = cpu_environment(matrix)
    declared = [c for c in matrix.cells if c.task == "dropout" and c.precision == "bf16" and c.device == "cpu"
                and c.strategy.startswith("zero")]
    assert declared and all(matrix.expected_outcome(c, env) is not None for c in declared)
    in_force = Threshold("dropout", "bf16", "zero", 8.7e-2, "eval/logits", False)
    [row] = exact_thresholds([in_force], matrix, env)
    assert row.passing == 0 and row.error is None and not row.meets_goal

