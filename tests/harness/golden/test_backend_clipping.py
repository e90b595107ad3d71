"""Gradient clipping as the sharding backends compute it, on the reference side
(harness.golden.backend_clipping): what each style clips to, where ZeRO-1/2 cuts its partitions,
and, against real cells, bit for bit: each style reproduces its backend's clipped run where
torch.nn.utils.clip_grad_norm_ over whole gradients (the golden's clip) does not."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness.calibrate.reduction_order import differing_quantities, reduction_order_perturbation
from harness.golden.backend_clipping import CLIP_STYLES, clip_as_backend, zero12_partitions
from harness.golden.reference import ReferenceInputs, train_reference
from harness.layout.report_dir import ReportDir
from harness.plan.cell import Cell
from harness.record.record_format import Record
from harness.tasks import get_task
from tests.harness.runner_helpers import output_tail, run_harness_in_process
from tests.run_if import run_if


def _grads(scale: float) -> list[torch.nn.Parameter]:
    """Parameters of SmallMLP's shapes (96, 16, 64 and 4 elements), gradients of norm ~ `scale`."""
    generator = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.zeros(shape)) for shape in ((16, 6), (16,), (4, 16), (4,))]
    for param in params:
        param.grad = torch.randn(param.shape, generator=generator)
    norm = torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None]))
    for param in params:
        assert param.grad is not None
        param.grad.mul_(scale / norm)
    return params


@pytest.mark.parametrize("style", CLIP_STYLES)
def test_each_style_clips_a_large_norm_to_the_max_and_leaves_a_small_one(style: str) -> None:
    large, small = _grads(3.0), _grads(0.25)
    before = [p.grad.clone() for p in small if p.grad is not None]
    clip_as_backend(style, large, 0.55, ranks=2)
    clip_as_backend(style, small, 0.55, ranks=2)
    clipped = torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in large if p.grad is not None]))
    assert abs(float(clipped) - 0.55) < 1e-6
    assert all(torch.equal(p.grad, b) for p, b in zip(small, before, strict=True))


def test_zero12_cuts_the_flattened_gradients_into_equal_partitions() -> None:
    # 180 elements on 2 ranks: 90 each, rank 0's inside the first weight (96 elements).
    pieces = zero12_partitions([p.grad for p in _grads(1.0) if p.grad is not None], ranks=2)
    assert [[p.numel() for p in rank] for rank in pieces] == [[90], [6, 16, 64, 4]]
    # 3 elements padded to 4 (2 x ranks): 2 and 1, the padding in no piece.
    pieces = zero12_partitions([torch.arange(3.0)], ranks=2)
    assert [[p.tolist() for p in rank] for rank in pieces] == [[[0.0, 1.0]], [[2.0]]]


def test_an_unknown_style_is_refused_with_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"valid: .*zero12"):
        clip_as_backend("zero4", _grads(1.0), 0.55, ranks=2)


@pytest.mark.slow
@run_if(deepspeed=True, why="the real ZeRO cells the clip styles must reproduce")
def test_each_style_reproduces_its_backends_clipped_cell_bit_for_bit(tmp_path: Path) -> None:
    cells = ("clip_norm-cpu2-zero1-fp32", "clip_norm-cpu2-zero3-fp32", "clip_norm-cpu2-fsdp-fp32")
    done = run_harness_in_process("run", "-k", " or ".join(cells), "--report-dir", str(tmp_path), timeout=300)
    assert done.returncode == 0, output_tail(done)
    task = get_task("clip_norm")
    inputs = ReferenceInputs.of(task)
    for cell_id in cells:
        record = Record.load(ReportDir(tmp_path).record(cell_id))
        styled = reduction_order_perturbation(Cell.from_id(cell_id))
        assert styled.clip_style
        same = train_reference(task, "fp32", inputs=inputs, perturbation=styled)
        assert differing_quantities(record, same) == {}, cell_id
        # The golden's clip over whole gradients misses this cell's bits: the style is what matches.
        whole = train_reference(task, "fp32", inputs=inputs, perturbation=replace(styled, clip_style=""))
        assert differing_quantities(record, whole), cell_id
