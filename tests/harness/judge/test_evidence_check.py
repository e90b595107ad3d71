"""Evidence first: a record made by a real run of another backend or precision, judged as the
cell that asked for something else, fails for that, with one sentence, before any number; the
numbers alone would have passed (fp32 results sit inside the bf16/fp16 tolerances)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from harness.judge.cell_verdict import judge_record
from harness.judge.evidence_check import evidence_mismatch
from harness.judge.outcome import Status
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.rank.loop import train_task
from harness.record.record_format import Record
from harness.tasks import get_task


@pytest.fixture(scope="module")
def fp32_single() -> Record:
    record = train_task(get_task("classifier"), precision="fp32", cpu=True, zero_stage=None)
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
    assert reason == ("evidence: asked for single bf16 on cpu1, the first module autocast acts on, "
                      "embed (Linear), computed in float32")
    # The numbers alone: every comparison inside the bf16 tolerance (why evidence must come first).
    record = copy.deepcopy(fp32_single)
    record.meta["evidence"].update(activation_dtype="bfloat16", activation_grad_dtype="bfloat16",
                                   eval_activation_dtype="bfloat16")
    assert _judge(tmp_path, cell, record)[0] is Status.PASSED


def test_an_fp16_cell_whose_autocast_did_nothing_fails_on_evidence(
    tmp_path: Path, fp32_single: Record
) -> None:
    cell = Cell("classifier", "cpu", 1, "single", "fp16")
    status, reason = _judge(tmp_path, cell, copy.deepcopy(fp32_single))
    assert status is Status.FAILED and "embed (Linear), computed in float32" in reason


def test_a_record_without_evidence_is_not_trusted(tmp_path: Path, fp32_single: Record) -> None:
    record = copy.deepcopy(fp32_single)
    record.meta = {}
    status, reason = _judge(tmp_path, Cell("classifier", "cpu", 1, "single", "fp32"), record)
    assert status is Status.FAILED and "no evidence of what ran" in reason


# ---------------------------------------------------------------- gradients, engine settings, dtypes
def _as_two_process(record: Record, strategy: str, **deepspeed: object) -> Record:
    """The single-process record's evidence restated as a 2-process run of `strategy` (what the
    rank writes there), to be edited into the fault under test."""
    record = copy.deepcopy(record)
    evidence = record.meta["evidence"]
    evidence.update(strategy=strategy, world_size=2, collectives={}, collective_elements={})
    if strategy == "ddp":
        evidence.update(strategy_class="DDPStrategy", gradients_agreed={"steps": 8, "agreed": 8})
    else:
        in_force = {"gradient_clipping": 0.0, "fp16_enabled": False, "bf16_enabled": False,
                    "gradient_accumulation_steps": 2}
        evidence.update(strategy_class="DeepSpeedStrategy", collectives={"all_reduce": 24},
                        collective_elements={"all_reduce": 8 * 400},
                        deepspeed={"zero_stage": int(strategy[-1]), "parameters": 7,
                                   "partitioned_parameters": 7 if strategy == "zero3" else 0,
                                   "trainable_elements": 400, "in_force": in_force, **deepspeed})
    return record


def test_zero3_that_partitioned_nothing_fails_on_evidence(fp32_single: Record) -> None:
    record = _as_two_process(fp32_single, "zero3", partitioned_parameters=0)
    mismatch = evidence_mismatch(Cell("classifier", "cpu", 2, "zero3", "fp32"), record)
    assert mismatch == "asked for zero3 fp32 on cpu2, no parameter was partitioned (7 kept whole)"


def test_the_real_single_process_run_records_gradient_dtype_and_no_collectives(fp32_single: Record) -> None:
    evidence = fp32_single.meta["evidence"]
    assert evidence["activation_grad_dtype"] == "float32"
    # One process: nothing to reduce, no other rank to agree with.
    assert evidence["collectives"] == {} and "gradients_agreed" not in evidence


def test_ddp_whose_ranks_held_different_gradients_fails_on_evidence(fp32_single: Record) -> None:
    cell = Cell("classifier", "cpu", 2, "ddp", "fp32")
    record = _as_two_process(fp32_single, "ddp")
    assert evidence_mismatch(cell, record) is None
    record.meta["evidence"]["gradients_agreed"] = {"steps": 8, "agreed": 0}
    assert evidence_mismatch(cell, record) == ("asked for ddp fp32 on cpu2, gradients were never "
                                               "all-reduced: "
                                               "the ranks held different gradients at 8 of 8 optimizer steps")
    del record.meta["evidence"]["gradients_agreed"]
    assert evidence_mismatch(cell, record) == ("asked for ddp fp32 on cpu2: the record has no evidence of "
                                               "gradients_agreed (evidence that is missing is a failure)")


def test_zero_whose_collectives_moved_no_gradient_fails_on_evidence(fp32_single: Record) -> None:
    cell = Cell("classifier", "cpu", 2, "zero2", "fp32")
    record = _as_two_process(fp32_single, "zero2")
    assert evidence_mismatch(cell, record) is None
    # Only the one-element all-reduces of a gradient norm: no gradient was reduced.
    record.meta["evidence"]["collective_elements"] = {"all_reduce": 8}
    mismatch = str(evidence_mismatch(cell, record))
    assert mismatch.startswith("asked for zero2 fp32 on cpu2, gradients were not reduced across ranks "
                               "on every step")
    assert "fewer than 3200 = trainable elements x 8 steps" in mismatch


def test_a_default_clip_in_force_fails_on_evidence(fp32_single: Record) -> None:
    cell = Cell("classifier", "cpu", 2, "zero1", "fp32")
    record = _as_two_process(fp32_single, "zero1")
    record.meta["evidence"]["deepspeed"]["in_force"]["gradient_clipping"] = 1.0
    assert evidence_mismatch(cell, record) == ("asked for zero1 fp32 on cpu2, the engine clips every "
                                               "step at 1 "
                                               "(gradient_clipping in force)")


def test_engine_precision_or_accumulation_other_than_asked_fails_on_evidence(fp32_single: Record) -> None:
    cell = Cell("classifier", "cpu", 2, "zero1", "fp32")
    record = _as_two_process(fp32_single, "zero1")
    record.meta["evidence"]["deepspeed"]["in_force"]["bf16_enabled"] = True
    expected = "asked for zero1 fp32 on cpu2, the engine ran with bf16_enabled=True"
    assert evidence_mismatch(cell, record) == expected
    record = _as_two_process(fp32_single, "zero1")
    record.meta["evidence"]["deepspeed"]["in_force"]["gradient_accumulation_steps"] = 1
    assert evidence_mismatch(cell, record) == ("asked for zero1 fp32 on cpu2, the engine accumulated over 1 "
                                               "micro-steps, the task over 2")


def test_an_evaluation_computed_in_another_dtype_than_training_fails_on_evidence(fp32_single: Record) -> None:
    """A core that autocasts the training forward only (catalog: autocast_in_training_only): the
    classifier's logits come out fp32 either way, and inside the bf16 tolerance of the golden's."""
    record = copy.deepcopy(fp32_single)
    record.meta["evidence"].update(activation_dtype="bfloat16", activation_grad_dtype="bfloat16")
    cell = Cell("classifier", "cpu", 1, "single", "bf16")
    assert evidence_mismatch(cell, record) == (
        "asked for single bf16 on cpu1, evaluation computed in float32 at the first module autocast acts "
        "on, embed (Linear), (training computed in bfloat16)")
    record.meta["evidence"]["eval_activation_dtype"] = None  # no evaluation forward reached the site
    assert "evaluation computed in nothing the evidence saw" in str(evidence_mismatch(cell, record))
    # A run that evaluated nothing (a resume source stops at its checkpoint) has nothing to judge.
    record.eval_outputs = {}
    assert evidence_mismatch(cell, record) is None


def test_a_gradient_of_another_dtype_fails_on_evidence(fp32_single: Record) -> None:
    record = copy.deepcopy(fp32_single)
    record.meta["evidence"].update(activation_dtype="bfloat16", activation_grad_dtype="float32")
    assert evidence_mismatch(Cell("classifier", "cpu", 1, "single", "bf16"), record) == (
        "asked for single bf16 on cpu1, the gradient flowing back into the output of a module autocast "
        "acts on was float32")


# ---------------------------------------------------------------- evidence that is missing
# Each field the cell's kind implies, removed from a record that otherwise agrees: the cell fails
# naming the field. The single-process fields come from the real run; the 2-process and ZeRO ones
# from its evidence restated as those runs write it (_as_two_process).
_FIELDS = [("single", field) for field in ("strategy", "strategy_class", "world_size", "device", "emulated",
                                           "random_draws", "activation_dtype", "activation_grad_dtype",
                                           "eval_activation_dtype",
                                           "unwrap_model", "gather")]
_FIELDS += [("ddp", field) for field in ("collectives", "collective_elements", "gradients_agreed")]
_FIELDS += [("zero3", field) for field in ("collectives", "collective_elements")]
_DEEPSPEED = ("zero_stage", "partitioned_parameters", "parameters", "in_force", "trainable_elements")
_FIELDS += [("zero3", f"deepspeed.{field}") for field in _DEEPSPEED]


@pytest.mark.parametrize(("strategy", "field"), _FIELDS, ids=[f"{s}-{f}" for s, f in _FIELDS])
def test_a_cell_whose_record_lacks_an_evidence_field_fails_naming_it(fp32_single: Record, strategy: str,
                                                                     field: str) -> None:
    processes = 1 if strategy == "single" else 2
    record = copy.deepcopy(fp32_single) if processes == 1 else _as_two_process(fp32_single, strategy)
    cell = Cell("classifier", "cpu", processes, strategy, "fp32")
    assert evidence_mismatch(cell, record) is None
    evidence = record.meta["evidence"]
    *parents, key = field.split(".")
    for parent in parents:
        evidence = evidence[parent]
    del evidence[key]
    mismatch = str(evidence_mismatch(cell, record))
    assert mismatch.startswith(f"asked for {strategy} fp32 on cpu{processes}"), mismatch
    assert f"no evidence of {field}" in mismatch, mismatch


def test_unwrap_model_returning_another_object_fails_on_evidence(tmp_path: Path, fp32_single: Record) -> None:
    record = copy.deepcopy(fp32_single)
    assert record.meta["evidence"]["unwrap_model"] == {"is_the_prepared_module": True, "class": "Classifier"}
    wrapper = {"is_the_prepared_module": False, "class": "DistributedDataParallel"}
    record.meta["evidence"]["unwrap_model"] = wrapper
    status, reason = _judge(tmp_path, Cell("classifier", "cpu", 1, "single", "fp32"), record)
    assert status is Status.FAILED
    assert reason == ("evidence: asked for single fp32 on cpu1, accelerator.unwrap_model(model) returned a "
                      "DistributedDataParallel, not the module the loop prepared (what a user saves or "
                      "inspects after training)")


def test_a_gather_that_disagreed_with_gather_for_metrics_fails_on_evidence(tmp_path: Path,
                                                                          fp32_single: Record) -> None:
    record = copy.deepcopy(fp32_single)
    gather = record.meta["evidence"]["gather"]
    assert gather["batches"] > 0 and gather["agreed"] == gather["batches"], gather
    record.meta["evidence"]["gather"] = {"batches": 4, "agreed": 3,
                                         "first_disagreement": "eval batch 2: logits came back with 3 rows"}
    status, reason = _judge(tmp_path, Cell("classifier", "cpu", 1, "single", "fp32"), record)
    assert status is Status.FAILED
    assert reason == ("evidence: asked for single fp32 on cpu1, accelerator.gather of a model output "
                      "disagreed with gather_for_metrics on 1 of 4 eval batches (eval batch 2: logits "
                      "came back with 3 rows)")


def test_the_real_run_reads_what_ran_from_the_objects(fp32_single: Record) -> None:
    evidence = fp32_single.meta["evidence"]
    # The prepared model is the user's own module (no wrapper), on the CPU, with no process group.
    assert evidence["model_class"] == "Classifier", evidence
    assert (evidence["strategy"], evidence["device"], evidence["world_size"]) == ("single", "cpu", 1)
