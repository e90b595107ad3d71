"""A backend's half-precision semantics, in plain PyTorch, for `harness calibrate` only.

DeepSpeed's fp16/bf16 engines hold the model itself in the half dtype: forward and backward run
on half weights, gradients are half (and accumulate in half over micro-batches), and the
optimizer steps fp32 master copies that are rounded back into the half weights after each step.
The golden (torch.autocast over fp32 weights) rounds only the operands of matmul-like ops. The
difference between the two is benign for a DeepSpeed cell, so calibration measures it here, on
the reference side, rather than reading it off the code under test.

What this copies from the core's DeepSpeed strategy (accelerate_core/strategies/deepspeed/strategy.py):
floating inputs are cast to the half dtype, forward still runs under torch.autocast (so losses
and reductions on autocast's fp32 list stay fp32), buffers keep their dtype, and BatchNorm keeps
fp32 weights.

FSDP2's MixedPrecisionPolicy(param_dtype=half, reduce_dtype=fp32) (`style="fsdp"`) differs in
two ways: no autocast (whole layers, the loss included, compute in the half dtype; the root's
outputs are cast to fp32), and each micro-batch's half gradients are reduced in fp32 into fp32
sharded gradients, so accumulation over micro-batches happens in fp32.

Never used to make a golden.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm


class HalfWeights:
    """`model` is the half copy the loop computes with; `master` (the caller's fp32 model, which
    the optimizer steps) holds the values a consolidated state dict hands out."""

    def __init__(self, master: nn.Module, dtype: torch.dtype, style: str = "deepspeed") -> None:
        if style not in ("deepspeed", "fsdp"):
            raise ValueError(f"style {style!r}: valid: 'deepspeed', 'fsdp'")
        self.master = master
        self.dtype = dtype
        self.autocast = style == "deepspeed"  # FSDP2 casts parameters and inputs instead
        self.accumulates_in_master = style == "fsdp"  # fp32 reduce into fp32 gradients
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

    def cast_inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.dtype) if v.is_floating_point() else v for k, v in batch.items()}

    def gradients_to_master(self) -> None:
        """The half gradients, widened, move to the master (inf and nan included): added to what
        it holds when accumulation is in fp32, else they replace it."""
        for master, half in self._pairs:
            if half.grad is not None:
                wide = half.grad.float()
                held = master.grad if self.accumulates_in_master else None
                master.grad = wide if held is None else held + wide
            half.grad = None

    def master_to_model(self) -> None:
        with torch.no_grad():
            for master, half in self._pairs:
                half.copy_(master)

    def buffers_to_master(self) -> None:
        """Running statistics live in the half copy (the one that ran forward)."""
        with torch.no_grad():
            for master, half in zip(self.master.buffers(), self.model.buffers(), strict=True):
                master.copy_(half)
