"""The backends' half-precision semantics on the reference side (harness.golden.half_weights): where
each style's fp32 masters start, and in which dtype and order each style reduces the ranks' half
gradients and accumulates them over micro-batches. The expected values are worked out by hand in
bf16 (7 mantissa bits: 1 + 2**-8 is a tie that rounds to 1, 1 + 2**-7 is exact), and the ZeRO styles
are held against real DeepSpeed cells, bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from harness.golden.half_weights import HalfWeights
from harness.golden.reference import Perturbation, train_reference
from harness.layout.report_dir import ReportDir
from harness.record.record_format import Record
from harness.tasks import get_task
from tests.harness.runner_helpers import output_tail, run_harness_in_process
from tests.run_if import run_if

HALF_ULP = 2.0 ** -8  # half of bf16's ulp at 1.0


def _one_weight(style: str, value: float = 1.0) -> HalfWeights:
    master = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        master.weight.fill_(value)
    return HalfWeights(master, torch.bfloat16, style, ranks=2)


def _feed(half: HalfWeights, grads_by_micro_batch: list[tuple[float, float]]) -> float:
    """Each micro-batch's (rank 0, rank 1) bf16 gradients through the style; the master's gradient."""
    (param,) = half.model.parameters()
    for grads in grads_by_micro_batch:
        for value in grads:
            param.grad = torch.full_like(param, value)  # what rank's backward left in its half .grad
            half.after_rank_backward()
    half.at_boundary()
    (master,) = half.master.parameters()
    assert master.grad is not None and master.grad.dtype == torch.float32
    return master.grad.item()


# rank 0 sees two small gradients, rank 1 one large: the order of the half-precision sums decides.
GRADS = [(HALF_ULP, 1.0), (HALF_ULP, 0.0)]


def test_zero1_accumulates_each_ranks_gradients_in_half_then_reduces_in_fp32() -> None:
    # rank 0: 2**-8 + 2**-8 = 2**-7 exactly in bf16; rank 1: 1. fp32 sum 1 + 2**-7, exact in bf16.
    assert _feed(_one_weight("zero1"), GRADS) == 1.0 + 2.0 ** -7


def test_zero2_reduces_every_micro_batch_in_fp32_and_accumulates_the_rounded_result_in_half() -> None:
    # micro-batch 0: 2**-8 + 1 in fp32, rounded to bf16: 1 (a tie to even); micro-batch 1: 2**-8.
    # Accumulated in bf16: 1 + 2**-8 rounds to 1 again.
    assert _feed(_one_weight("zero2"), GRADS) == 1.0


def test_fsdp_accumulates_every_half_gradient_in_fp32() -> None:
    assert _feed(_one_weight("fsdp"), GRADS) == 1.0 + 2.0 ** -7


def test_the_accumulators_start_again_after_each_boundary() -> None:
    half = _one_weight("zero2")
    _feed(half, GRADS)
    (master,) = half.master.parameters()
    master.grad = None  # the optimizer's zero_grad
    assert _feed(half, [(HALF_ULP, HALF_ULP)]) == 2.0 ** -7


def test_deepspeed_masters_start_from_the_half_weights_and_fsdp_masters_from_the_exact_ones() -> None:
    exact = 1.0 + HALF_ULP / 2  # rounds to 1.0 in bf16
    for style, start in (("zero1", 1.0), ("zero2", 1.0), ("fsdp", exact)):
        half = _one_weight(style, exact)
        (master,), (model,) = half.master.parameters(), half.model.parameters()
        assert master.dtype == torch.float32 and model.dtype == torch.bfloat16
        assert master.item() == start, style
        assert model.item() == 1.0


def test_an_unknown_style_is_refused_with_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="'zero1', 'zero2', 'fsdp'"):
        HalfWeights(nn.Linear(1, 1), torch.bfloat16, "deepspeed")


@pytest.mark.slow
@run_if(deepspeed=True, why="the real ZeRO cells the variants must reproduce")
def test_the_zero_styles_reproduce_real_zero_cells_bit_for_bit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # sgd_accum accumulates over micro-batches (3, then a short 2) and SGD sees every gradient's
    # scale: where ZeRO-1 and ZeRO-2 round in another order, its weights differ.
    cells = {"sgd_accum-cpu2-zero1-bf16": "zero1", "sgd_accum-cpu2-zero2-bf16": "zero2"}
    done = run_harness_in_process("run", "-k", " or ".join(cells), "--report-dir", str(tmp_path), timeout=300)
    assert done.returncode == 0, output_tail(done)
    folder = ReportDir(tmp_path)
    task = get_task("sgd_accum")
    finals = {}
    for cell_id, style in cells.items():
        record = Record.load(folder.record(cell_id))
        variant = train_reference(task, "bf16", perturbation=Perturbation(splits=2, half_weights=style))
        for name, value in record.state_dict.items():
            assert torch.equal(value, variant.state_dict[name]), (cell_id, name)
        for name, value in record.eval_outputs.items():
            assert torch.equal(value, variant.eval_outputs[name]), (cell_id, name)
        finals[style] = variant.state_dict
    # The two stages' orders give other bits: the test tells them apart.
    assert any(not torch.equal(finals["zero1"][k], finals["zero2"][k]) for k in finals["zero1"])
