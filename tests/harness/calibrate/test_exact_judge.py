"""The exact tier, judged (`harness run --exact`, harness.calibrate.exact_judge): a passed cell of the
tier stays passed only when its record equals its reduction-order reference bit for bit, and one
ulp anywhere fails it, named; cells outside the tier are left as they were, saying why. The records
are the reference's own, computed here: nothing assumes which cells of a real run on this machine
are exact (`calibrate --exact-tier` measures that, and `tier_lines` says when the tier does not hold).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.calibrate.exact_judge import EXCLUDED, judge_exactly, tier_lines, why_not_in_tier
from harness.calibrate.exact_tier import ExactCheck
from harness.calibrate.reduction_order import reduction_order_perturbation
from harness.golden.reference import ReferenceInputs, train_reference
from harness.judge.outcome import CellResult, Failure, Status
from harness.plan.cell import Cell
from harness.record.record_format import Record
from harness.tasks import get_task


def _record(cell_id: str, tmp_path: Path, move_one_ulp: bool = False) -> Path:
    task, cell = get_task("regression"), Cell.from_id(cell_id)
    record = train_reference(task, cell.precision, inputs=ReferenceInputs.of(task),
                             perturbation=reduction_order_perturbation(cell))
    if move_one_ulp:
        name = sorted(record.state_dict)[0]
        flat = record.state_dict[name].view(-1)
        flat[0] = torch.nextafter(flat[0], torch.tensor(float("inf"), dtype=flat.dtype))
    path = tmp_path / cell_id
    record.save(path)
    return path


def _passed(cell_id: str) -> CellResult:
    return CellResult(Cell.from_id(cell_id), Status.PASSED, duration_s=1.0)


@pytest.mark.parametrize("cell_id", ["regression-cpu1-single-fp32", "regression-cpu2-zero3-bf16"])
def test_a_bit_identical_cell_of_the_tier_stays_passed_and_says_so(cell_id: str, tmp_path: Path) -> None:
    judged = judge_exactly(_passed(cell_id), _record(cell_id, tmp_path))
    assert judged.status == Status.PASSED
    assert judged.extra["exact_tier"] == "bit-identical to its reference"


def test_one_ulp_in_one_weight_fails_the_cell_naming_the_quantity(tmp_path: Path) -> None:
    cell_id = "regression-cpu2-ddp-fp32"
    judged = judge_exactly(_passed(cell_id), _record(cell_id, tmp_path, move_one_ulp=True))
    assert judged.status == Status.FAILED and judged.failure == Failure.DIVERGENCE
    name = sorted(Record.load(tmp_path / cell_id).state_dict)[0]
    assert f"largest state_dict/{name} (1 element(s)" in judged.reason
    assert "not bit-identical to the reduction-order reference" in judged.reason
    exact = [c for c in judged.comparisons if c.quantity.startswith("exact:")]
    assert [c.quantity for c in exact] == [f"exact:state_dict/{name}"]
    assert not exact[0].ok and exact[0].atol == 0.0 and 0 < exact[0].max_abs_diff < 1e-6


def test_a_result_that_did_not_pass_is_left_alone(tmp_path: Path) -> None:
    cell_id = "regression-cpu1-single-fp32"
    failed = CellResult(Cell.from_id(cell_id), Status.FAILED, "weights out of tolerance",
                        failure=Failure.DIVERGENCE)
    assert judge_exactly(failed, tmp_path / "no-record-needed") is failed


@pytest.mark.parametrize(("cell_id", "why"), [
    ("classifier-cpu2-ddp-fp32", "AdamW over three parameter groups"),
    ("sgd_accum-cpu2-zero1-fp32", "each rank accumulates its own micro-batches"),
    ("uneven_drop-cpu2-fsdp-fp32", "each rank accumulates its own micro-batches"),
    ("batchnorm_sync-cpu2-ddp-fp32", "SyncBatchNorm sums each rank's statistics"),
    ("batchnorm_sync-cpu2-zero2-bf16", "not modelled: synchronised BatchNorm under zero2"),
    ("regression-cuda1-single-fp32", "not a CPU cell"),
    ("regression-cpu1-single-fp32-accelerate", "implementation 'accelerate'"),
])
def test_cells_outside_the_tier_are_not_judged_exactly_and_say_why(cell_id: str, why: str,
                                                                   tmp_path: Path) -> None:
    assert why in why_not_in_tier(Cell.from_id(cell_id))
    judged = judge_exactly(_passed(cell_id), tmp_path / "never-read")
    assert judged.status == Status.PASSED and judged.extra["exact_tier"].startswith("not judged exactly")


@pytest.mark.parametrize("cell_id", ["classifier-cpu2-ddp-fp16", "sgd_accum-cpu2-zero2-bf16",
                                     "clip_norm-cpu2-ddp-fp32", "lm-cpu2-zero3-fp32",
                                     "clip_norm-cpu2-zero3-fp32", "clip_norm-cpu2-fsdp-bf16",
                                     "batchnorm-cpu1-single-fp32"])
def test_the_tier_keeps_what_the_exclusions_do_not_name(cell_id: str) -> None:
    assert why_not_in_tier(Cell.from_id(cell_id)) == ""


def test_every_exclusion_says_why() -> None:
    assert all(expression and len(reason) > 40 for expression, reason in EXCLUDED)


def test_the_measurement_names_members_that_are_not_exact_on_this_machine() -> None:
    checks = [ExactCheck("regression-cpu1-single-fp32", True),
              ExactCheck("lm-cpu2-zero3-fp16", False, {"eval/logits": (3, 1e-3)}),
              ExactCheck("classifier-cpu2-ddp-fp32", True),  # excluded, yet exact here
              ExactCheck("batchnorm_sync-cpu2-zero2-bf16", False, why_not_checked="not modelled: ...")]
    lines = tier_lines(checks)
    assert lines[0] == ("judged tier (run --exact): 1 of its 2 measured members bit-identical here; NOT "
                        "exact here, so --exact would fail them: lm-cpu2-zero3-fp16")
    assert lines[1] == "exact here but outside the tier: classifier-cpu2-ddp-fp32"


def test_deciding_the_tier_in_a_judging_thread_leaves_other_threads_initial_weights_alone() -> None:
    """The runner judges cells in parallel threads; deciding whether a 2-process cell is modelled
    builds its task's model, which seeds torch's global RNG. Without the process's RNG lock, another
    thread hashing a task's initial weights (every golden load does) got wrong hashes: 873 of 1059
    here, and a real `--exact` kill-matrix run refused a golden for it."""
    import threading

    from harness.golden.golden_store import _identity

    lm = get_task("lm")
    expected = _identity(lm)[2]
    done = threading.Event()

    def decide() -> None:
        while not done.is_set():
            why_not_in_tier(Cell.from_id("lm-cpu2-ddp-bf16"))

    worker = threading.Thread(target=decide)
    worker.start()
    try:
        hashes = [_identity(lm)[2] for _ in range(200)]
    finally:
        done.set()
        worker.join()
    assert hashes == [expected] * 200
