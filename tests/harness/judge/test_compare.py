"""Comparison against a golden: per-quantity verdicts that agree with
torch.testing, divergence located in steps and tensors, and a diagnosis sentence."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from harness.golden.golden_store import load_golden
from harness.judge.compare import compare_record, diagnose
from harness.plan.matrix import load_matrix
from harness.plan.tolerances import Tolerance
from harness.record.record_format import Record

# Reads the goldens: run again against goldens made elsewhere (nox -s foreign_goldens).
pytestmark = pytest.mark.goldens

FP32 = Tolerance(precision="fp32", family="plain", rtol=1.3e-6, atol=1e-5, reason="test")


def _by_name(comparisons: list) -> dict:
    return {c.quantity: c for c in comparisons}


@pytest.fixture
def golden() -> Record:
    return load_golden("lm", "fp32")


def test_identical_record_passes_everything(golden: Record) -> None:
    comparisons = compare_record(copy.deepcopy(golden), golden, FP32)
    assert all(c.ok and c.max_abs_diff == 0 and c.first_divergence is None for c in comparisons)
    names = {c.quantity for c in comparisons}
    assert {"losses", "lrs", "skipped_steps", "loss_scales", "eval/logits", "state_dict/head.weight"} <= names
    assert len(names) == 4 + len(golden.eval_outputs) + len(golden.state_dict)


def test_one_changed_element_names_tensor_and_index(golden: Record) -> None:
    record = copy.deepcopy(golden)
    record.state_dict["block.qkv.weight"][5, 7] += 1e-3
    by_name = _by_name(compare_record(record, golden, FP32))
    bad = [q for q, c in by_name.items() if not c.ok]
    assert bad == ["state_dict/block.qkv.weight"]
    comparison = by_name["state_dict/block.qkv.weight"]
    assert comparison.first_divergence == "index (5, 7)"
    assert comparison.max_abs_diff == pytest.approx(1e-3, rel=1e-3)
    expected_used = 1e-3 / (FP32.atol + FP32.rtol * abs(float(golden.state_dict["block.qkv.weight"][5, 7])))
    assert comparison.tolerance_used == pytest.approx(expected_used, rel=1e-3)


def test_loss_divergence_is_located_in_time(golden: Record) -> None:
    record = copy.deepcopy(golden)
    for step in range(7, len(record.losses)):
        record.losses[step] *= 1.01
    record.losses[9] = math.nan
    losses = _by_name(compare_record(record, golden, FP32))["losses"]
    assert not losses.ok and losses.first_divergence == "step 7"
    assert losses.note == "NaN first at step 9" and math.isinf(losses.max_abs_diff)


def test_missing_and_extra_tensors_and_shapes(golden: Record) -> None:
    record = copy.deepcopy(golden)
    del record.state_dict["head.weight"]
    record.state_dict["extra"] = torch.zeros(2)
    record.eval_outputs["logits"] = record.eval_outputs["logits"][:-1]
    by_name = _by_name(compare_record(record, golden, FP32))
    assert by_name["state_dict/head.weight"].note == "missing from the record"
    assert by_name["state_dict/extra"].note == "in the record but not in the golden"
    logits = by_name["eval/logits"]
    assert not logits.ok and logits.note is not None
    assert "shape (36, 8, 24) vs golden (37, 8, 24)" in logits.note


def test_loss_scales_must_match_exactly() -> None:
    # A scaling policy that halves one step later is another policy, even when the same step
    # was skipped: loss scales get no tolerance at all.
    golden = load_golden("classifier", "fp16")
    assert golden.loss_scales, "the fp16 golden records GradScaler's scales"
    record = copy.deepcopy(golden)
    record.loss_scales[-1] *= 2
    loosest = load_matrix().tolerance_for("fp16", "zero3")
    scales = _by_name(compare_record(record, golden, loosest))["loss_scales"]
    assert not scales.ok and scales.first_divergence == f"optimizer step {len(golden.loss_scales) - 1}"
    assert (scales.rtol, scales.atol) == (0.0, 0.0)


def test_learning_rates_get_no_precision_allowance(golden: Record) -> None:
    record = copy.deepcopy(golden)
    record.lrs[4] = [lr * 1.01 for lr in record.lrs[4]]  # a scheduler a step off moves lr ~1%
    loosest = load_matrix().tolerance_for("bf16", "zero3")
    lrs = _by_name(compare_record(record, golden, loosest))["lrs"]
    assert not lrs.ok and lrs.first_divergence == "optimizer step 4 (param group 0)"
    assert (lrs.rtol, lrs.atol) == (1e-9, 0.0)


def test_skipped_steps_must_match(golden: Record) -> None:
    record = copy.deepcopy(golden)
    record.skipped_steps = [2, 5]
    skipped = _by_name(compare_record(record, golden, FP32))["skipped_steps"]
    assert not skipped.ok and skipped.first_divergence == "optimizer step 2"


@pytest.mark.parametrize("seed", range(20))
def test_verdicts_agree_with_torch_testing(seed: int) -> None:
    """The independent reference for the pass rule: torch.testing.assert_close."""
    generator = torch.Generator().manual_seed(seed)
    expected = torch.randn(50, generator=generator) * 10 ** torch.randint(-6, 2, (50,), generator=generator)
    noise = 10.0 ** -float(torch.randint(4, 8, (1,), generator=generator))
    actual = expected + torch.randn(50, generator=generator) * noise
    golden = load_golden("regression", "fp32")
    record = copy.deepcopy(golden)
    golden.state_dict["probe"], record.state_dict["probe"] = expected, actual
    comparison = _by_name(compare_record(record, golden, FP32))["state_dict/probe"]
    try:
        torch.testing.assert_close(actual, expected, rtol=FP32.rtol, atol=FP32.atol)
        reference_ok = True
    except AssertionError:
        reference_ok = False
    assert comparison.ok == reference_ok
    assert comparison.ok == (comparison.tolerance_used <= 1.0)


def test_diagnosis_reads_like_one(golden: Record) -> None:
    record = copy.deepcopy(golden)
    record.losses[7] += 0.1
    record.state_dict["head.weight"][0, 3] += 0.5
    record.state_dict["norm.bias"][1] += 0.01
    record.loss_scales = [65536.0, 65536.0, 32768.0, 32768.0, 32768.0, 16384.0]
    record.skipped_steps = [2, 5]
    golden.loss_scales = list(record.loss_scales)
    golden.skipped_steps = [2, 5]
    sentence = diagnose("lm-cpu2-zero2-bf16", compare_record(record, golden, FP32), record)
    assert sentence.startswith("zero2 bf16: loss leaves tolerance at step 7")
    assert "final weights `head.weight` and 1 more out of tolerance at index (0, 3)" in sentence
    assert sentence.endswith("steps skipped on overflow: 2, 5; loss scale halved at steps 2, 5")


def test_diagnosis_of_a_pass() -> None:
    golden = load_golden("regression", "fp32")
    sentence = diagnose("regression-cpu1-single-fp32", compare_record(golden, golden, FP32), golden)
    assert sentence.startswith("single fp32: all 8 quantities within tolerance")


def test_buffers_are_named_buffers_and_a_step0_divergence_with_one_names_per_rank_statistics() -> None:
    golden = load_golden("batchnorm", "fp32")
    record = load_golden("batchnorm", "fp32")
    record.losses[0] += 0.05  # the forward pass already differs, before any update
    record.state_dict["net.1.running_var"][2] += 0.3
    record.state_dict["net.0.weight"][1, 1] += 0.2
    buffers = frozenset({"net.1.running_mean", "net.1.running_var", "net.1.num_batches_tracked"})
    comparisons = compare_record(record, golden, FP32)
    sentence = diagnose("batchnorm-cpu2-ddp-fp32", comparisons, record, buffers)
    assert "final weights `net.0.weight` out of tolerance at index (1, 1)" in sentence
    assert "final buffers `net.1.running_var` out of tolerance at index (2,)" in sentence
    assert "likely cause: per-rank batch statistics" in sentence and "sync_batchnorm" in sentence
    # One process has no per-rank statistics; a buffer off with a later first divergence is
    # another story; without the buffer names every tensor is a weight.
    assert "per-rank" not in diagnose("batchnorm-cpu1-single-fp32", comparisons, record, buffers)
    record.losses[0] = golden.losses[0]
    record.losses[5] += 0.05
    later = diagnose("batchnorm-cpu2-ddp-fp32", compare_record(record, golden, FP32), record, buffers)
    assert "per-rank" not in later and "loss leaves tolerance at step 5" in later
    moved = diagnose("batchnorm-cpu2-ddp-fp32", compare_record(record, golden, FP32), record, buffers,
                     first_loss_moved=True)  # e.g. bf16: a step-0 difference inside its tolerance
    assert "per-rank batch statistics" in moved
    unnamed = diagnose("batchnorm-cpu2-ddp-fp32", comparisons, record)
    assert "buffers" not in unnamed and "final weights `net.1.running_var` and 1 more" in unnamed


def test_a_buffer_in_another_dtype_is_no_sign_of_per_rank_statistics() -> None:
    # A model cast to bf16 before sharding (buffers and all): the step-0 loss moves and a buffer
    # fails, on its dtype. That is the cast, not statistics computed per rank.
    golden = load_golden("batchnorm", "fp32")
    record = load_golden("batchnorm", "fp32")
    record.losses[0] += 0.05
    record.state_dict["net.1.running_var"] = record.state_dict["net.1.running_var"].bfloat16()
    buffers = frozenset({"net.1.running_mean", "net.1.running_var", "net.1.num_batches_tracked"})
    sentence = diagnose("batchnorm-cpu2-fsdp-fp32", compare_record(record, golden, FP32), record, buffers)
    assert "dtype bfloat16 where the golden's is float32" in sentence
    assert "per-rank" not in sentence
    record.state_dict["net.1.running_var"] = golden.state_dict["net.1.running_var"] + 0.3  # values moved
    moved = diagnose("batchnorm-cpu2-fsdp-fp32", compare_record(record, golden, FP32), record, buffers)
    assert "per-rank batch statistics" in moved


def test_a_tensor_in_another_dtype_fails_even_when_its_values_agree(golden: Record) -> None:
    # A backend handing out bf16 weights where the plain reference's are fp32: the values of an
    # fp32 tensor that happens to be representable in bf16 agree exactly, and still it fails.
    record, reference = copy.deepcopy(golden), copy.deepcopy(golden)
    weight = reference.state_dict["head.weight"].to(torch.bfloat16).to(torch.float32)
    reference.state_dict["head.weight"] = weight
    record.state_dict["head.weight"] = weight.to(torch.bfloat16)
    comparison = _by_name(compare_record(record, reference, FP32))["state_dict/head.weight"]
    assert not comparison.ok and comparison.max_abs_diff == 0
    assert comparison.first_divergence == "dtype"
    assert comparison.note is not None
    assert comparison.note.startswith("dtype bfloat16 where the golden's is float32")
    sentence = diagnose("lm-cpu1-single-fp32", compare_record(record, reference, FP32), record)
    assert "`head.weight`" in sentence and "dtype bfloat16" in sentence


def test_nan_never_matches_not_even_a_nan_in_the_golden(golden: Record) -> None:
    record, reference = copy.deepcopy(golden), copy.deepcopy(golden)
    record.state_dict["head.weight"][0, 0] = math.nan
    reference.state_dict["head.weight"][0, 0] = math.nan
    comparison = _by_name(compare_record(record, reference, FP32))["state_dict/head.weight"]
    assert not comparison.ok and comparison.first_divergence == "index (0, 0)"
    assert comparison.note is not None and "the golden holds NaN (first at index (0, 0))" in comparison.note


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_a_nonfinite_value_where_the_golden_is_finite_fails(golden: Record, value: float) -> None:
    record = copy.deepcopy(golden)
    record.eval_outputs["logits"][2, 3, 4] = value
    comparison = _by_name(compare_record(record, golden, FP32))["eval/logits"]
    assert not comparison.ok and comparison.first_divergence == "index (2, 3, 4)"
    assert comparison.note == ("NaN" if math.isnan(value) else "Inf") + " first at index (2, 3, 4)"


def test_equal_infinities_agree(golden: Record) -> None:
    record, reference = copy.deepcopy(golden), copy.deepcopy(golden)
    record.losses[3] = reference.losses[3] = math.inf
    assert _by_name(compare_record(record, reference, FP32))["losses"].ok


def test_deepspeed_half_cells_demand_half_model_outputs_and_the_goldens_dtype_elsewhere(
    golden: Record,
) -> None:
    from harness.judge.output_dtype import expected_output_dtype
    from harness.plan.cell import Cell

    assert expected_output_dtype(Cell.from_id("lm-cpu2-zero3-bf16")) == torch.bfloat16
    assert expected_output_dtype(Cell.from_id("lm-cpu2-zero1-fp16")) == torch.float16
    assert expected_output_dtype(Cell.from_id("lm-cpu2-ddp-bf16")) is None  # autocast: the golden's
    assert expected_output_dtype(Cell.from_id("lm-cpu2-zero3-fp32")) is None
    record = copy.deepcopy(golden)  # fp32 logits where DeepSpeed bf16 gives bf16: the engine ran fp32
    logits = _by_name(compare_record(record, golden, FP32, torch.bfloat16))["eval/logits"]
    assert not logits.ok and logits.note is not None
    assert logits.note.startswith("dtype float32 where the backend's precision gives bfloat16")
    record.eval_outputs["logits"] = record.eval_outputs["logits"].to(torch.bfloat16)
    by_name = _by_name(compare_record(record, golden, FP32, torch.bfloat16))
    assert by_name["eval/logits"].first_divergence != "dtype"  # judged on its values from here
    assert by_name["eval/labels"].ok  # data, not the model's output: the golden's dtype (int64)
