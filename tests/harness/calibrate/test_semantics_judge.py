"""The own-semantics check (harness.calibrate.semantics_judge), part of every run's judging: a
passed half-precision cell whose backend the reduction-order reference reproduces also has its
final weights compared with that reference, at the tolerance measured for it. The records are
the reference's own, computed here, so nothing assumes which bits this CPU computes: a cell
with no bug *is* its reference (bit for bit on every CPU measured), and a cell with the bug is
the reference with it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from harness.calibrate.reduction_order import reduction_order_perturbation
from harness.calibrate.semantics_judge import SEMANTICS_PREFIX, judge_semantics, semantics_entry
from harness.calibrate.semantics_noise import variation_here, variations
from harness.golden.golden_store import load_golden
from harness.golden.reference import ReferenceInputs, train_reference
from harness.judge.compare import compare_record
from harness.judge.outcome import CellResult, Failure, Status
from harness.judge.output_dtype import expected_output_dtype
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.record.record_format import Record
from harness.tasks import get_task

pytestmark = pytest.mark.goldens

ZERO_BF16 = "sgd_accum-cpu2-zero2-bf16"


def _reference(cell: Cell, gradient_scale: float = 1.0, exact_accumulation: bool = False,
               threads: int | None = None) -> Record:
    task = get_task(cell.task)
    base = reduction_order_perturbation(cell)
    perturbation = replace(base, gradient_scale=gradient_scale, exact_accumulation=exact_accumulation,
                           threads=threads or base.threads)
    return train_reference(task, cell.precision, inputs=ReferenceInputs.of(task), perturbation=perturbation)


def _judge(cell: Cell, record: Record, tmp_path: Path) -> CellResult:
    record.save(tmp_path / cell.id)
    passed = CellResult(cell, Status.PASSED, duration_s=1.0)
    return judge_semantics(passed, tmp_path / cell.id, load_matrix().tolerances)


def test_the_issues_case_a_zero_bf16_cell_of_sgd_accum_with_gradients_x_1_02_fails(tmp_path: Path) -> None:
    """The golden comparison lets it through (a ZeRO bf16 cell must be allowed DeepSpeed's own
    rounding of the weights); the check against DeepSpeed's own precision does not."""
    cell = Cell.from_id(ZERO_BF16)
    bug = _reference(cell, gradient_scale=1.02)
    matrix = load_matrix()
    golden = load_golden("sgd_accum", "bf16")
    against_golden = compare_record(bug, golden, matrix.tolerance_for("bf16", "zero2", "sgd_accum"),
                                    expected_output_dtype(cell))
    assert all(c.ok for c in against_golden), "the golden comparison alone now catches it: see docs"
    judged = _judge(cell, bug, tmp_path)
    assert judged.status == Status.FAILED and judged.failure == Failure.DIVERGENCE
    assert "splits_2_zero2 reference" in judged.reason and "inside the golden's tolerance" in judged.reason
    failing = [c for c in judged.comparisons if c.quantity.startswith(SEMANTICS_PREFIX) and not c.ok]
    assert failing and all(c.rtol == 0 and c.tolerance_used > 1 for c in failing)


def test_a_tenth_of_a_percent_is_caught_too(tmp_path: Path) -> None:
    cell = Cell.from_id(ZERO_BF16)
    assert _judge(cell, _reference(cell, gradient_scale=1.001), tmp_path).status == Status.FAILED


@pytest.mark.parametrize("cell_id", [ZERO_BF16, "lm-cpu2-zero1-fp16", "dropout-cpu1-single-bf16",
                                     "shuffle-cpu2-fsdp-bf16", "regression-cpu2-ddp-fp16"])
def test_the_reference_and_its_benign_variations_pass(cell_id: str, tmp_path: Path) -> None:
    cell = Cell.from_id(cell_id)
    entry, why = semantics_entry(cell, load_matrix().tolerances)
    assert entry is not None, why
    unperturbed = _judge(cell, _reference(cell), tmp_path)
    assert unperturbed.status == Status.PASSED and "bit-identical" in unperturbed.extra["semantics"]
    for variation in variations(reduction_order_perturbation(cell)):
        record = _reference(cell, exact_accumulation=variation.exact_accumulation, threads=variation.threads)
        judged = _judge(cell, record, tmp_path / variation.name)
        assert judged.status == Status.PASSED, (variation.name, judged.reason)


@pytest.mark.parametrize(("cell_id", "why"), [
    ("sgd_accum-cpu2-zero2-fp32", "fp32"),
    ("batchnorm_sync-cpu2-ddp-bf16", "SyncBatchNorm sums each rank's statistics"),
    ("batchnorm_sync-cpu2-zero1-bf16", "not modelled"),
    ("sgd_accum-cuda2-zero2-bf16", "not a CPU cell"),
])
def test_cells_outside_its_scope_are_left_as_they_were_and_say_why(cell_id: str, why: str) -> None:
    entry, reason = semantics_entry(Cell.from_id(cell_id), load_matrix().tolerances)
    assert entry is None and why in reason


def test_a_cell_without_a_measured_tolerance_is_not_checked_and_says_so(tmp_path: Path) -> None:
    cell = Cell.from_id(ZERO_BF16)
    record = _reference(cell, gradient_scale=1.02)
    record.save(tmp_path / cell.id)
    table = load_matrix().tolerances
    without = replace(table, semantics={k: v for k, v in table.semantics.items() if k[1] != "sgd_accum"})
    judged = judge_semantics(CellResult(cell, Status.PASSED, duration_s=1.0), tmp_path / cell.id, without)
    assert judged.status == Status.PASSED
    assert "no measured tolerance for bf16 sgd_accum splits_2_zero2" in judged.extra["semantics"]


def test_a_result_that_did_not_pass_is_left_alone(tmp_path: Path) -> None:
    cell = Cell.from_id(ZERO_BF16)
    failed = CellResult(cell, Status.FAILED, reason="loss leaves tolerance", failure=Failure.DIVERGENCE)
    assert judge_semantics(failed, tmp_path / "absent", load_matrix().tolerances) is failed


@pytest.mark.parametrize("cell_id", ["lm-cpu2-zero1-bf16", ZERO_BF16])
def test_the_judge_never_applies_an_atol_below_this_machines_own_variation(cell_id: str) -> None:
    """The file may have been measured on other CPUs: here, its atol is widened to what the
    reference's in-process variations need on this machine, at the same safety factor."""
    cell = Cell.from_id(cell_id)
    table = load_matrix().tolerances
    entry, _ = semantics_entry(cell, table)
    assert entry is not None
    need, variant, _ = variation_here(cell, entry.task)
    assert entry.atol >= 2 * need
    file_entry = table.semantics[entry.key]
    tight = replace(table, semantics={**table.semantics, entry.key: replace(file_entry, atol=0.0, need=0.0)})
    widened, _ = semantics_entry(cell, tight)
    assert widened is not None
    if need > 0:
        assert widened.atol >= 2 * need and variant in widened.reason
        assert "widened on this machine" in widened.reason
    else:  # nothing moved here: the file's figure stands
        assert widened.atol == 0.0


def test_this_machines_variation_is_measured_only_when_the_files_atol_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Widening only raises an atol, so it can only turn a failure into a pass: a cell that passes at
    the file's atol is judged by it, with no reference runs for this machine's variation; one
    that fails at it is judged again at the widened atol, where this machine's variation earns it."""
    import harness.calibrate.semantics_judge as judge_module

    cell = Cell.from_id("lm-cpu2-zero1-bf16")
    measured: list[str] = []
    real = judge_module.widened_here

    def counted(entry, cell):  # type: ignore[no-untyped-def]
        measured.append(cell.id)
        return real(entry, cell)

    monkeypatch.setattr(judge_module, "widened_here", counted)
    table = load_matrix().tolerances
    entry, _ = semantics_entry(cell, table, widen=False)
    assert entry is not None
    tight = replace(table, semantics={**table.semantics, entry.key: replace(entry, atol=0.0, need=0.0)})
    passed = CellResult(cell, Status.PASSED, duration_s=1.0)
    reference = _reference(cell)
    reference.save(tmp_path / "same" / cell.id)
    same = judge_semantics(passed, tmp_path / "same" / cell.id, tight)
    assert same.status == Status.PASSED and measured == []  # bit-identical: passes at atol 0 as it stands
    assert same.extra["semantics"].startswith("final weights within atol 0 ")

    need, variant, _ = variation_here(cell, entry.task)
    by_name = {v.name: v for v in variations(reduction_order_perturbation(cell))}
    moved = reference if not need else _reference(cell, threads=by_name[variant].threads,
                                                  exact_accumulation=by_name[variant].exact_accumulation)
    moved.save(tmp_path / "moved" / cell.id)
    judged = judge_semantics(passed, tmp_path / "moved" / cell.id, tight)
    if need > 0:  # fails at the file's atol 0, passes at the atol this machine's variation earns
        assert measured == [cell.id]
        assert judged.status == Status.PASSED, judged.reason
        assert all(c.atol >= 2 * need for c in judged.comparisons if c.quantity.startswith(SEMANTICS_PREFIX))
    else:  # nothing moved here: nothing to widen, nothing measured
        assert judged.status == Status.PASSED and measured == []
