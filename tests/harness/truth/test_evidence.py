"""Evidence first: a record made by a real run of another backend or precision, judged as the
cell that asked for something else, fails for that, with one sentence, before any number; the
numbers alone would have passed (fp32 results sit inside the bf16/fp16 tolerances)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from harness.rank.loop import train_with_core
from harness.spec.cell import Cell
from harness.spec.matrix import load_matrix
from harness.tasks import get_task
from harness.truth.evidence import evidence_mismatch
from harness.truth.judge import judge_record
from harness.truth.outcome import Status
from harness.truth.record import Record


@pytest.fixture(scope="module")
def fp32_single() -> Record:
    record = train_with_core(get_task("classifier"), precision="fp32", cpu=True, zero_stage=None)
    assert record is not None
    return record


def _judge(tmp_path: Path, cell: Cell, record: Record) -> tuple[Status, str]:
    record.save(tmp_path / cell.id)
    result = judge_record(cell, tmp_path / cell.id, duration_s=0.0, emulated=False, env_name="t",
                          matrix=load_matrix())
    return result.status, result.reason


def test_the_run_as_asked_has_matching_evidence(fp32_single: Record) -> None:
    evidence = fp32_single.meta["evidence"]
    assert evidence["strategy"] == "single" and evidence["strategy_class"] == "SingleDeviceStrategy"
    assert evidence["world_size"] == 1 and evidence["activation_dtype"] == "float32"
    assert evidence_mismatch(Cell("classifier", "cpu", 1, "single", "fp32"), fp32_single) is None


def test_asked_for_deepspeed_but_no_engine_ran_fails_on_evidence(tmp_path: Path, fp32_single: Record) -> None:
    cell = Cell("classifier", "cpu", 1, "zero1", "fp32")
    status, reason = _judge(tmp_path, cell, copy.deepcopy(fp32_single))
    assert status is Status.FAILED
    assert reason == ("evidence: asked for zero1 fp32 on cpu1, the run had no DeepSpeed engine "
                      "(SingleDeviceStrategy ran)")


def test_asked_for_bf16_but_computed_in_fp32_fails_on_evidence_though_the_numbers_pass(
    tmp_path: Path, fp32_single: Record
) -> None:
    cell = Cell("classifier", "cpu", 1, "single", "bf16")
    status, reason = _judge(tmp_path, cell, copy.deepcopy(fp32_single))
    assert status is Status.FAILED
    assert reason == "evidence: asked for single bf16 on cpu1, the first Linear layer computed in float32"
    # The numbers alone: every comparison inside the bf16 tolerance (why evidence must come first).
    record = copy.deepcopy(fp32_single)
    record.meta["evidence"]["activation_dtype"] = "bfloat16"
    assert _judge(tmp_path, cell, record)[0] is Status.PASSED


def test_an_fp16_cell_whose_autocast_did_nothing_fails_on_evidence(
    tmp_path: Path, fp32_single: Record
) -> None:
    cell = Cell("classifier", "cpu", 1, "single", "fp16")
    status, reason = _judge(tmp_path, cell, copy.deepcopy(fp32_single))
    assert status is Status.FAILED and "the first Linear layer computed in float32" in reason


def test_a_record_without_evidence_is_not_trusted(tmp_path: Path, fp32_single: Record) -> None:
    record = copy.deepcopy(fp32_single)
    record.meta = {}
    status, reason = _judge(tmp_path, Cell("classifier", "cpu", 1, "single", "fp32"), record)
    assert status is Status.FAILED and "no evidence of what ran" in reason


def test_zero3_that_partitioned_nothing_fails_on_evidence(fp32_single: Record) -> None:
    record = copy.deepcopy(fp32_single)
    record.meta["evidence"].update(strategy="zero3", world_size=2, strategy_class="DeepSpeedStrategy",
                                   deepspeed={"zero_stage": 3, "parameters": 7, "partitioned_parameters": 0})
    mismatch = evidence_mismatch(Cell("classifier", "cpu", 2, "zero3", "fp32"), record)
    assert mismatch == "asked for zero3 fp32 on cpu2, no parameter was partitioned (7 kept whole)"
