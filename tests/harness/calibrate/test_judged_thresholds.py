"""Detection thresholds as every run judges the cells (harness.calibrate.judged_thresholds): a
cell the own-semantics check judges fails at the smaller of its check's threshold and the row's
golden figure; a cell it does not judge keeps the golden figure; a row takes its weakest passing
cell's. The in-force rows are given by hand, so nothing assumes this CPU's golden figures."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.calibrate.cell_thresholds import cpu_environment, passing_cpu_cells
from harness.calibrate.judged_thresholds import judged_thresholds, semantics_threshold
from harness.calibrate.reduction_order import reduction_order_perturbation, reduction_order_reference
from harness.calibrate.semantics_judge import semantics_comparisons, semantics_entry
from harness.calibrate.thresholds import GOALS, Threshold
from harness.golden.reference import ReferenceInputs, train_reference
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.tasks import get_task

pytestmark = pytest.mark.goldens


def test_a_cells_threshold_is_where_its_weights_leave_the_checks_tolerance() -> None:
    cell = Cell.from_id("sgd_accum-cpu2-zero2-bf16")
    entry, _ = semantics_entry(cell, load_matrix().tolerances)
    assert entry is not None
    error, caught_by = semantics_threshold(cell, entry)
    assert error is not None and caught_by.startswith("semantics:state_dict/")
    task = get_task("sgd_accum")
    unperturbed = reduction_order_reference(cell, "sgd_accum")

    def passes(e: float) -> bool:
        bug = replace(reduction_order_perturbation(cell), gradient_scale=1.0 + e)
        record = train_reference(task, "bf16", inputs=ReferenceInputs.of(task), perturbation=bug)
        return all(c.ok for c in semantics_comparisons(record, unperturbed, entry))

    assert not passes(error) and passes(error / 1.2)


def test_zero_bf16_rows_meet_the_goal_that_the_golden_comparison_misses() -> None:
    """The golden figure (5%: a ZeRO bf16 cell is allowed DeepSpeed's rounding of every weight) is
    the row's in force; every cell of the row is checked, so the row meets bf16's 2%."""
    matrix = load_matrix()
    env = cpu_environment(matrix)
    golden = Threshold("sgd_accum", "bf16", "zero", 5e-2, "state_dict/hidden.weight", False,
                       "two_ranks_zero1_half")
    [row] = judged_thresholds([golden], matrix, env)
    cells = passing_cpu_cells(matrix, env, "sgd_accum", "bf16", "zero")
    assert row.members == row.passing == len(cells) == 3
    assert row.error is not None and row.error <= GOALS["bf16"] and row.caught_by.startswith("semantics:")


def test_a_cell_the_check_does_not_judge_keeps_the_golden_figure() -> None:
    matrix = load_matrix()
    golden = Threshold("batchnorm", "bf16", "zero", 9.3e-3, "losses", False)
    [row] = judged_thresholds([golden], matrix, cpu_environment(matrix))
    assert row.members == 0 and row.passing == 3 and row.error == 9.3e-3
    assert "the golden comparison alone" in row.caught_by


def test_a_row_of_declared_failures_has_no_passing_cell() -> None:
    matrix = load_matrix()
    golden = Threshold("dropout", "bf16", "zero", 8.7e-2, "eval/logits", False)
    [row] = judged_thresholds([golden], matrix, cpu_environment(matrix))
    assert row.passing == 0 and row.error is None and "declared failure" in row.caught_by


def test_a_row_the_matrix_has_no_cell_of_says_so_not_that_its_cells_fail() -> None:
    """A user's matrix has no cell of the harness's tasks: its rows are absent, not declared failures."""
    matrix = load_matrix()
    without_sgd_accum = replace(matrix, cells=[c for c in matrix.cells if c.task != "sgd_accum"])
    golden = Threshold("sgd_accum", "bf16", "zero", 5e-2, "state_dict/hidden.weight", False)
    [row] = judged_thresholds([golden], without_sgd_accum, cpu_environment(matrix))
    assert row.passing == 0 and row.error is None
    assert row.caught_by == "none: the matrix has no CPU cell of this row"
