"""Script mode's evidence check (harness.script.judge): what ran, read from the objects that ran,
against the cell; the dtypes the model computed in, not the precision object, decide precision."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from harness.judge.outcome import Status
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.record.record_format import Fingerprint, Record
from harness.script.judge import judge_script_cell, script_evidence_mismatch


def _evidence(mixed_precision: str, computed: list[str] | None, strategy: str = "single") -> dict[str, Any]:
    evidence: dict[str, Any] = {"strategy": strategy, "world_size": 1, "device": "cpu",
                                "mixed_precision": mixed_precision, "zero_stage": None,
                                "loss_scaling": mixed_precision == "fp16", "emulated": False}
    if computed is not None:
        evidence["computed_dtypes"] = computed
    return evidence


@pytest.mark.parametrize(("precision", "computed"), [
    ("fp32", ["float32"]), ("bf16", ["bfloat16", "float32"]), ("fp16", ["float16", "float32"])])
def test_a_run_that_computed_in_its_precision_agrees(precision: str, computed: list[str]) -> None:
    mixed = "no" if precision == "fp32" else precision
    cell = Cell("train", "cpu", 1, "single", precision)
    assert script_evidence_mismatch(cell, _evidence(mixed, computed)) is None


def test_a_half_precision_asked_for_and_never_applied_fails() -> None:
    """The precision object says bf16 (what was asked); no module computed in it (what ran)."""
    cell = Cell("train", "cpu", 1, "single", "bf16")
    mismatch = script_evidence_mismatch(cell, _evidence("bf16", ["float32"]))
    assert mismatch == ("asked for single bf16 on cpu1, no module of the model computed in bfloat16 in its "
                        "training forward (computed in: float32)")


def test_an_fp32_cell_whose_model_computed_in_half_fails() -> None:
    mismatch = script_evidence_mismatch(Cell("train", "cpu", 1, "single", "fp32"),
                                        _evidence("no", ["bfloat16", "float32"]))
    assert mismatch == "asked for single fp32 on cpu1, the model's training forward computed in bfloat16"


def test_a_record_without_the_dtypes_fails_naming_them() -> None:
    mismatch = script_evidence_mismatch(Cell("train", "cpu", 1, "single", "fp32"), _evidence("no", None))
    assert mismatch is not None and "no evidence of computed_dtypes" in mismatch


def _record(logits: torch.Tensor, strategy: str, evidence: dict[str, Any]) -> Record:
    return Record(task="train", precision="bf16", losses=[0.5], lrs=[[0.1]], skipped_steps=[], loss_scales=[],
                  eval_outputs={"train.py:89": logits, "train.py:90": torch.tensor([1, 0])},
                  state_dict={"w": torch.ones(2)}, meta={"evidence": evidence},
                  fingerprint=Fingerprint.here(device="cpu", world_size=2, seed=0, precision="bf16",
                                               strategy=strategy))


@pytest.mark.parametrize(("dtype", "passes"), [(torch.float32, True), (torch.bfloat16, False)])
def test_an_fsdp_half_cells_outputs_are_judged_in_the_dtype_its_root_returns(dtype: torch.dtype,
                                                                              passes: bool) -> None:
    """As in the matrix (harness.judge.output_dtype): under a half policy FSDP2's root returns fp32
    outputs, so a model output the one-process reference computed in bf16 comes back fp32; the data
    the script gathered (integer labels) keeps its own dtype."""
    logits = torch.tensor([[0.5, -1.0], [2.0, 0.25]])
    reference = _record(logits.to(torch.bfloat16), "single", _evidence("bf16", ["bfloat16"]))
    cell = Cell("train", "cpu", 2, "fsdp", "bf16")
    evidence = {**_evidence("bf16", ["bfloat16", "float32"], "fsdp"), "world_size": 2}
    result = judge_script_cell(cell, _record(logits.to(dtype), "fsdp", evidence), reference,
                               Cell("train", "cpu", 1, "single", "bf16"), load_matrix(), 1.0, False)
    assert (result.status is Status.PASSED) is passes, result.reason
    if not passes:
        assert "dtype bfloat16 where the backend's precision gives float32" in result.reason, result.reason
