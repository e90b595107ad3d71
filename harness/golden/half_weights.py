"""A backend's half-precision semantics, in plain PyTorch, for `harness calibrate` only.

DeepSpeed's fp16/bf16 engines hold the model itself in the half dtype: the engine casts the
module to half first and ZeRO then copies its fp32 master weights from those half parameters, so
training starts from the initial weights rounded to half (the golden starts from them exact).
Forward and backward run on half weights, each rank's gradients are half, and the optimizer steps
the fp32 masters, rounded back into the half weights after each step. How a rank's half gradients
become the masters' gradient depends on the stage (measured against real cells, deepspeed 0.19.8,
communication_data_type fp32; docs/calibration.md):
- "zero1" (ZeRO-1): each rank accumulates its micro-batches' gradients in its half `.grad`; at the
  accumulation boundary the ranks' sums are reduced in fp32 and rounded back to half;
- "zero2" (ZeRO-2 and ZeRO-3): every micro-batch's gradients are reduced across ranks in fp32 and
  rounded back to half, and those reduced half gradients accumulate, in half, over micro-batches.
The golden (torch.autocast over fp32 weights) rounds only the operands of matmul-like ops. The
difference between the two is benign for a DeepSpeed cell, so calibration measures it here, on
the reference side, rather than reading it off the code under test.

What this copies from the core's DeepSpeed strategy (accelerate_core/strategies/deepspeed/strategy.py):
floating inputs are cast to the half dtype, forward still runs under torch.autocast (so losses
and reductions on autocast's fp32 list stay fp32), buffers keep their dtype, and BatchNorm keeps
fp32 weights.

FSDP2's MixedPrecisionPolicy(param_dtype=half, reduce_dtype=fp32) (`style="fsdp"`) differs: no
autocast (whole layers, the loss included, compute in the half dtype; the root's outputs are cast
to fp32), the masters start exact, and each micro-batch's half gradients are reduced in fp32 into
fp32 sharded gradients, so accumulation over micro-batches happens in fp32.

Never used to make a golden.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

STYLES = ("zero1", "zero2", "fsdp")
DEEPSPEED_STYLES = ("zero1", "zero2")


class HalfWeights:
    """`model` is the half copy the loop computes with; `master` (the caller's fp32 model, which
    the optimizer steps) holds the values a consolidated state dict hands out."""

    def __init__(self, master: nn.Module, dtype: torch.dtype, style: str, ranks: int = 1) -> None:
        if style not in STYLES:
            raise ValueError(f"style {style!r}: valid: {STYLES}")
        self.master = master
        self.dtype = dtype
        self.style = style
        self.ranks = ranks  # each optimizer step's micro-batches come as this many ranks' shares
        self.autocast = style in DEEPSPEED_STYLES  # FSDP2 casts parameters and inputs instead
        self.model = copy.deepcopy(master)
        halves: dict[int, nn.Parameter] = {}  # one half copy per parameter: tied weights stay tied
        for module in self.model.modules():
            # Parameters only (recurse=False keeps each module's own): buffers keep their dtype.
            for name, param in module.named_parameters(recurse=False):
                if not isinstance(module, _BatchNorm):
                    if id(param) not in halves:
                        halves[id(param)] = nn.Parameter(param.detach().to(dtype))
                    module._parameters[name] = halves[id(param)]
        self._pairs = list(zip(master.parameters(), self.model.parameters(), strict=True))
        if style in DEEPSPEED_STYLES:
            self._masters_from_half()
        self._backwards = 0  # rank micro-batches since the last optimizer step
        self._accumulated: list[list[torch.Tensor | None]] = []  # per parameter: per rank or one sum
        self._reset()

    def cast_inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.dtype) if v.is_floating_point() else v for k, v in batch.items()}

    def after_rank_backward(self) -> None:
        """One rank's micro-batch has run backward into the half model's `.grad`: take it over (inf
        and nan included) as the style reduces and accumulates it."""
        rank = self._backwards % self.ranks
        self._backwards += 1
        for index, (master, half) in enumerate(self._pairs):
            grad, half.grad = half.grad, None
            if grad is None:
                continue
            held = self._accumulated[index]
            if self.style == "fsdp":  # widened and reduced in fp32 into the fp32 gradient
                master.grad = _added(master.grad, grad.float())
            elif self.style == "zero1":  # the rank's own half .grad, summed in half
                held[rank] = _added(held[rank], grad)
            else:  # zero2: once every rank's share of this micro-batch is in, reduced in fp32
                held[rank] = grad
                if rank == self.ranks - 1:
                    reduced = _sum_in_fp32(held[:self.ranks]).to(grad.dtype)
                    held[self.ranks] = _added(held[self.ranks], reduced)
                    held[:self.ranks] = [None] * self.ranks

    def at_boundary(self) -> None:
        """The accumulation boundary: the masters' gradients, before the optimizer step."""
        if self.style == "fsdp":
            return
        for index, (master, half) in enumerate(self._pairs):
            held = self._accumulated[index]
            if self.style == "zero1":
                if any(g is not None for g in held[:self.ranks]):  # rounded back to the parameter's dtype
                    master.grad = _sum_in_fp32(held[:self.ranks]).to(half.dtype).float()
            elif (accumulated := held[self.ranks]) is not None:
                master.grad = accumulated.float()
        self._reset()

    def _reset(self) -> None:
        self._backwards = 0
        self._accumulated = [[None] * (self.ranks + 1) for _ in self._pairs]

    def _masters_from_half(self) -> None:
        with torch.no_grad():
            for master, half in self._pairs:
                master.copy_(half)

    def master_to_model(self) -> None:
        with torch.no_grad():
            for master, half in self._pairs:
                half.copy_(master)

    def buffers_to_master(self) -> None:
        """Running statistics live in the half copy (the one that ran forward)."""
        with torch.no_grad():
            for master, half in zip(self.master.buffers(), self.model.buffers(), strict=True):
                master.copy_(half)


def _added(held: torch.Tensor | None, grad: torch.Tensor) -> torch.Tensor:
    """`grad` added to what is held (in their dtype), or `grad` when nothing is."""
    return grad if held is None else held + grad


def _sum_in_fp32(grads: list[torch.Tensor | None]) -> torch.Tensor:
    """The ranks' half gradients summed in fp32 (communication_data_type fp32), in rank order."""
    present = [g.float() for g in grads if g is not None]
    total = present[0]
    for grad in present[1:]:
        total = total + grad
    return total
