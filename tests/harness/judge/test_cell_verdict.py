"""The judge's rules without a launch: expected outcomes say HOW a cell fails (status and a
regex on the diagnosis), randomness in training fails multi-process cells, buffers are named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.golden.golden_store import load_golden
from harness.judge.cell_verdict import RANDOMNESS, apply_expected, buffer_names, judge_record, new_result
from harness.judge.outcome import CellResult, Failure, Status
from harness.plan.cell import Cell
from harness.plan.matrix import Expected, Match, load_matrix
from tests.harness.runner_helpers import SINGLE_CPU_EVIDENCE

# Reads the goldens: run again against goldens made elsewhere (nox -s foreign_goldens).
pytestmark = pytest.mark.goldens


def _result(status: Status, failure: Failure | None = None, reason: str = "observed reason",
            detail: str = "") -> CellResult:
    return new_result(Cell.from_id("lm-cpu2-zero3-bf16"), status, reason, failure=failure, detail=detail)


def _declared(status: str = "failed", match: str | None = None) -> Expected:
    return Expected(Match({"strategy": ("zero3",)}), status, "known DeepSpeed issue 42",
                    diagnosis=re.compile(match) if match else None)


def test_a_failure_of_the_declared_kind_is_xfailed_and_a_pass_is_xpassed() -> None:
    failed = apply_expected(_result(Status.FAILED, Failure.DIVERGENCE), _declared())
    assert failed.status == Status.XFAILED and "known DeepSpeed issue 42" in failed.reason
    assert "observed reason" in failed.reason
    assert apply_expected(_result(Status.FAILED, Failure.RANDOMNESS), _declared()).status == Status.XFAILED
    assert apply_expected(_result(Status.CRASHED), _declared("crashed")).status == Status.XFAILED
    passed = apply_expected(_result(Status.PASSED), _declared())
    assert passed.status == Status.XPASSED and passed.status.is_unexpected_failure
    assert apply_expected(_result(Status.SKIPPED), _declared()).status == Status.SKIPPED
    assert apply_expected(_result(Status.FAILED, Failure.DIVERGENCE), None).status == Status.FAILED


def test_an_exception_where_a_divergence_was_declared_is_an_unexpected_failure() -> None:
    raised = apply_expected(_result(Status.FAILED, Failure.EXCEPTION, "exception in training: "
                                    "RuntimeError: expected scalar type Half but found Float"), _declared())
    assert raised.status == Status.FAILED and raised.status.is_unexpected_failure
    assert "declared expected to fail (known DeepSpeed issue 42), but it failed with status " in raised.reason
    assert "'exception' instead of 'failed'" in raised.reason and "expected scalar type Half" in raised.reason
    assert raised.extra["expected"]["status"] == "failed"
    crashed = apply_expected(_result(Status.CRASHED), _declared())
    assert crashed.status == Status.CRASHED and "'crashed' instead of 'failed'" in crashed.reason


def test_match_is_searched_in_the_diagnosis_and_an_exception_s_traceback() -> None:
    per_rank = "loss leaves tolerance at step 0; likely cause: per-rank batch statistics"
    hit = apply_expected(_result(Status.FAILED, Failure.DIVERGENCE, per_rank), _declared(match="per-rank"))
    assert hit.status == Status.XFAILED
    miss = apply_expected(_result(Status.FAILED, Failure.DIVERGENCE, "eval outputs off"),
                          _declared(match="per-rank"))
    assert miss.status == Status.FAILED and "does not match 'per-rank'" in miss.reason
    in_traceback = _result(Status.FAILED, Failure.EXCEPTION, "exception in training: ValueError: x",
                           detail="Traceback ...\n  File 'engine.py'\nValueError: x")
    assert apply_expected(in_traceback, _declared("exception", "engine\\.py")).status == Status.XFAILED


def test_buffers_are_told_apart_from_weights() -> None:
    assert buffer_names("batchnorm") == {
        "net.1.running_mean", "net.1.running_var", "net.1.num_batches_tracked"}
    assert buffer_names("regression") == frozenset()


def _judge(cell_id: str, tmp_path: Path, draws: int) -> CellResult:
    """A cell's record that is the golden itself (numbers bit-identical), with the evidence of a
    run that drew random numbers in `draws` of its steps."""
    cell = Cell.from_id(cell_id)
    record = load_golden("dropout", "fp32")
    evidence = {**SINGLE_CPU_EVIDENCE, "world_size": cell.processes, "strategy": cell.strategy,
                "activation_dtype": "float32", "activation_grad_dtype": "float32",
                "eval_activation_dtype": "float32"}
    if cell.processes > 1:  # what a DDP run writes besides (the judge requires every field)
        evidence.update(strategy_class="DDPStrategy", collectives={}, collective_elements={},
                        gradients_agreed={"steps": len(record.lrs), "agreed": len(record.lrs)})
    evidence["random_draws"] = {"steps": len(record.losses), "drawing": draws,
                                "generators": "torch CPU generator"}
    record.meta = {"evidence": evidence}
    record.save(tmp_path / cell.id)
    return judge_record(cell, tmp_path / cell.id, duration_s=0.0, emulated=False, env_name="t",
                        matrix=load_matrix(None))


def test_randomness_decides_only_multi_process_cells(tmp_path: Path) -> None:
    assert _judge("dropout-cpu1-single-fp32", tmp_path, draws=8).status == Status.PASSED
    # Two processes with numbers identical to the golden (luck, here by construction): still failed.
    pair = _judge("dropout-cpu2-ddp-fp32", tmp_path, draws=8)
    assert pair.status == Status.FAILED and pair.failure == Failure.RANDOMNESS
    assert pair.reason.startswith(RANDOMNESS + " (8 of 8 training steps drew from torch CPU generator)")
    assert "within tolerance" in pair.reason
