"""An fsdp cell must prove FSDP2 ran: a record whose evidence says DDP ran, or that the model
stayed whole, fails on evidence with one sentence, before any number (fp32 training is the same
math on any backend, so the numbers alone would pass). The records are a real single-process run's,
its evidence restated as each 2-process run writes it (accelerate_core/evidence/fsdp.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from harness.judge.evidence_check import evidence_mismatch
from harness.judge.fsdp_evidence_check import FSDP_FIELDS
from harness.judge.output_dtype import expected_output_dtype
from harness.plan.cell import Cell
from harness.rank.loop import train_task
from harness.record.record_format import Record
from harness.tasks import get_task

FSDP_FP32 = Cell("classifier", "cpu", 2, "fsdp", "fp32")
FSDP_BF16 = Cell("classifier", "cpu", 2, "fsdp", "bf16")


@pytest.fixture(scope="module")
def fp32_single() -> Record:
    record = train_task(get_task("classifier"), precision="fp32", cpu=True, zero_stage=None)
    assert record is not None
    return record


def _fsdp_block(**changes: Any) -> dict[str, Any]:
    """What the rank writes for classifier on 2 ranks (a real cpu2 run's values)."""
    block: dict[str, Any] = {
        "units": 4, "parameters": 7, "sharded_parameters": 7, "plain_parameters": [], "mesh_sizes": [2],
        "placements": ["S(0)"], "full_elements": 517, "local_elements": 259, "trainable_elements": 341,
        "wrapped_modules": [["head", "body", "embed", ""]], "unsharded_parameters": [],
        "param_dtype": "float32", "reduce_dtype": "float32", "output_dtype": "none",
    }
    block.update(changes)
    return block


def _as_fsdp(record: Record, precision: str = "fp32", **changes: Any) -> Record:
    record = copy.deepcopy(record)
    evidence = record.meta["evidence"]
    half = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[precision]
    evidence.update(strategy="fsdp", strategy_class="FSDPStrategy", model_class="FSDPClassifier",
                    world_size=2,
                    collectives={"all_gather_single": 48, "reduce_scatter_single": 32},
                    collective_elements={"all_gather_single": 8288, "reduce_scatter_single": 5472},
                    activation_dtype=half, activation_grad_dtype=half, eval_activation_dtype=half)
    defaults = {"param_dtype": half, "output_dtype": "none" if precision == "fp32" else "float32"}
    evidence["fsdp"] = _fsdp_block(**{**defaults, **changes})
    return record


def test_the_fsdp_run_as_asked_agrees(fp32_single: Record) -> None:
    assert evidence_mismatch(FSDP_FP32, _as_fsdp(fp32_single)) is None
    assert evidence_mismatch(FSDP_BF16, _as_fsdp(fp32_single, "bf16")) is None


def test_asked_for_fsdp_but_ddp_ran_fails_on_evidence(fp32_single: Record) -> None:
    record = copy.deepcopy(fp32_single)
    # What a DDP run writes (harness.rank.recorder): the wrapper, its strategy, agreeing gradients.
    record.meta["evidence"].update(strategy="ddp", strategy_class="DDPStrategy", world_size=2,
                                   model_class="DistributedDataParallel", collectives={},
                                   collective_elements={}, gradients_agreed={"steps": 8, "agreed": 8})
    assert evidence_mismatch(FSDP_FP32, record) == (
        "asked for fsdp fp32 on cpu2, the run had ddp (DDPStrategy)")
    # The same when the core's FSDPStrategy object is there but built DDP under it.
    record.meta["evidence"]["strategy_class"] = "FSDPStrategy"
    assert evidence_mismatch(FSDP_FP32, record) == (
        "asked for fsdp fp32 on cpu2, the run had ddp (FSDPStrategy)")


def test_the_strategy_says_fsdp_but_no_unit_was_made_fails_on_evidence(fp32_single: Record) -> None:
    record = _as_fsdp(fp32_single)
    del record.meta["evidence"]["fsdp"]
    assert evidence_mismatch(FSDP_FP32, record) == (
        "asked for fsdp fp32 on cpu2, the run had no FSDP2 units "
                                                   "(FSDPStrategy ran)")
    record = _as_fsdp(fp32_single, units=0)
    assert evidence_mismatch(FSDP_FP32, record) == (
        "asked for fsdp fp32 on cpu2, fully_shard made no module "
                                                   "of the model an FSDP unit")


def test_an_unsharded_model_fails_on_evidence(fp32_single: Record) -> None:
    """fully_shard skipped: parameters stay plain tensors, each rank holds all of them."""
    record = _as_fsdp(fp32_single, sharded_parameters=0, local_elements=517,
                      plain_parameters=["embed.weight", "body.weight"])
    assert evidence_mismatch(FSDP_FP32, record) == (
        "asked for fsdp fp32 on cpu2, only 0 of 7 parameters were sharded DTensors (left whole: body.weight, "
        "embed.weight)")
    # The strategy's own report of a parameter it left whole counts too.
    record = _as_fsdp(fp32_single, unsharded_parameters=["head.bias"])
    assert "only 7 of 7 parameters were sharded DTensors (left whole: head.bias)" in str(
        evidence_mismatch(FSDP_FP32, record))


def test_sharded_over_the_wrong_mesh_or_not_split_fails_on_evidence(fp32_single: Record) -> None:
    record = _as_fsdp(fp32_single, mesh_sizes=[1])
    assert evidence_mismatch(FSDP_FP32, record) == (
        "asked for fsdp fp32 on cpu2, the parameters were sharded "
                                                   "over mesh size(s) [1]")
    record = _as_fsdp(fp32_single, local_elements=517)
    assert evidence_mismatch(FSDP_FP32, record) == (
        "asked for fsdp fp32 on cpu2, rank 0 held 517 of the "
                                                   "model's 517 parameter elements: nothing was split "
                                                   "across ranks")


def test_batchnorm_units_in_fp32_agree_and_in_the_half_dtype_fail(fp32_single: Record) -> None:
    # Under a half policy the core keeps BatchNorm units in fp32 (docs/fsdp.md); the rest of the
    # model must still compute in the half dtype.
    record = _as_fsdp(fp32_single, "bf16", batchnorm_param_dtype="float32")
    assert evidence_mismatch(FSDP_BF16, record) is None
    assert evidence_mismatch(FSDP_FP32, _as_fsdp(fp32_single, batchnorm_param_dtype="float32")) is None
    record = _as_fsdp(fp32_single, "bf16", batchnorm_param_dtype="bfloat16")
    assert evidence_mismatch(FSDP_BF16, record) == (
        "asked for fsdp bf16 on cpu2, FSDP2 computed BatchNorm units in bfloat16")
    record = _as_fsdp(fp32_single, "bf16", param_dtype="bfloat16+float32", batchnorm_param_dtype="float32")
    assert evidence_mismatch(FSDP_BF16, record) == (
        "asked for fsdp bf16 on cpu2, FSDP2 computed with parameters in bfloat16+float32")


def test_fsdp_dtypes_other_than_the_precision_means_fail_on_evidence(fp32_single: Record) -> None:
    record = _as_fsdp(fp32_single, "bf16", param_dtype="float32")
    assert evidence_mismatch(FSDP_BF16, record) == (
        "asked for fsdp bf16 on cpu2, FSDP2 computed with "
                                                   "parameters in float32")
    record = _as_fsdp(fp32_single, "bf16", reduce_dtype="bfloat16")
    assert evidence_mismatch(FSDP_BF16, record) == (
        "asked for fsdp bf16 on cpu2, FSDP2 reduce-scattered "
                                                   "gradients in bfloat16")
    record = _as_fsdp(fp32_single, "bf16", output_dtype="none")
    assert evidence_mismatch(FSDP_BF16, record) == (
        "asked for fsdp bf16 on cpu2, FSDP2's root unit cast its "
                                                   "outputs to none")


def test_fsdp_that_reduce_scattered_no_gradient_fails_on_evidence(fp32_single: Record) -> None:
    record = _as_fsdp(fp32_single)
    record.meta["evidence"]["collective_elements"] = {"all_gather_single": 8288}
    mismatch = str(evidence_mismatch(FSDP_FP32, record))
    assert mismatch.startswith("asked for fsdp fp32 on cpu2, gradients were not reduced across "
                               "ranks"), mismatch
    assert f"fewer than {341 * len(record.lrs)} = trainable elements" in mismatch


@pytest.mark.parametrize("field", FSDP_FIELDS)
def test_an_fsdp_record_lacking_a_field_fails_naming_it(fp32_single: Record, field: str) -> None:
    record = _as_fsdp(fp32_single)
    del record.meta["evidence"]["fsdp"][field]
    mismatch = str(evidence_mismatch(FSDP_FP32, record))
    assert mismatch.startswith("asked for fsdp fp32 on cpu2: the record has no evidence of"), mismatch
    assert f"fsdp.{field}" in mismatch


def test_an_fsdp_record_judged_as_ddp_fails_on_evidence(fp32_single: Record) -> None:
    record = _as_fsdp(fp32_single)
    ddp = Cell("classifier", "cpu", 2, "ddp", "fp32")
    # An FSDP2 run does not check gradient agreement (its gradients are shards): missing for ddp.
    assert "no evidence of gradients_agreed" in str(evidence_mismatch(ddp, record))
    record.meta["evidence"]["gradients_agreed"] = {"steps": 8, "agreed": 8}
    assert evidence_mismatch(ddp, record) == "asked for ddp fp32 on cpu2, the run had fsdp (FSDPStrategy)"


def test_fsdp_half_cells_must_give_fp32_outputs() -> None:
    """The core's root unit casts outputs to fp32 (docs/fsdp.md); ZeRO's are half, autocast's the golden's."""
    import torch

    assert expected_output_dtype(FSDP_BF16) is torch.float32
    assert expected_output_dtype(FSDP_FP32) is None
    assert expected_output_dtype(Cell("classifier", "cpu", 2, "zero3", "bf16")) is torch.bfloat16


def test_a_model_fully_shard_never_touched_fails_saying_what_ran(fp32_single: Record) -> None:
    """What the rank writes when fully_shard was skipped: no unit, no DTensor, so no dtypes to
    read; the model is the plain module, so the backend that ran reads as single."""
    record = _as_fsdp(fp32_single, units=0, sharded_parameters=0, local_elements=517, mesh_sizes=[],
                      placements=[], plain_parameters=["embed.weight"])
    evidence = record.meta["evidence"]
    for key in ("param_dtype", "reduce_dtype", "output_dtype"):
        del evidence["fsdp"][key]
    evidence.update(strategy="single", model_class="Classifier")
    assert evidence_mismatch(FSDP_FP32, record) == (
        "asked for fsdp fp32 on cpu2, the run had single "
                                                   "(FSDPStrategy)")
