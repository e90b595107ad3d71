"""BatchNorm inside a half-precision DeepSpeed engine (fp16 / bf16, ZeRO 1-3).

The failure: the engine casts every parameter to the half dtype, BatchNorm's weight and bias
included, and keeps buffers, its running statistics included, in fp32 (precision/deepspeed.py,
floating buffers). torch's batch_norm accepts a half input with fp32 weight and statistics, or
all of them in the half dtype, but not half weights with fp32 statistics: the engine's first
forward fails with "expected scalar type Half (BFloat16) but found Float" (DeepSpeed 0.19.8).

The reference is torch.autocast on the plain model (the amp golden). Autocast puts batch_norm on
none of its lists (measured, torch 2.13, CPU: a bf16/fp16 input gives a bf16/fp16 output, an
fp32 input an fp32 output): the layer keeps its fp32 weight and statistics and the kernel runs
in fp32 internally on the half input, returning the input's dtype. The closest the engine can
come is the same kernel call: during each BatchNorm forward, the layer's weight and bias are
presented as fp32 (a differentiable cast of the engine's half parameters, whose gradient flows
back to them as half), with the fp32 statistics untouched. What remains different is only what
the engine itself does: the weights are rounded to the half dtype between steps.

The alternatives were worse: casting the running statistics to half (DeepSpeed's buffer_dtype)
accumulates them in half for good; running the whole layer in fp32 (casting the input up) would
return fp32 activations where autocast returns half ones.

How: two hooks on every BatchNorm module of the engine's model (nn.SyncBatchNorm and the core's
SyncBatchNorm included). A forward pre-hook, registered after deepspeed.initialize so that it
runs AFTER ZeRO-3's own pre-hook has gathered the parameters, swaps each half parameter in the
module's parameter dict for its fp32 cast (what torch.func.functional_call does to substitute
parameters); a forward hook, prepended so that it runs BEFORE ZeRO-3's post-hook releases the
parameters, and always called (also when forward raised), puts the parameters back.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.hooks import RemovableHandle

_AFFINE = ("weight", "bias")
_SWAPPED = "_accelerate_core_half_batchnorm_params"


def _present_fp32(module: nn.Module, args: Any) -> None:
    originals: dict[str, nn.Parameter] = {}
    for name in _AFFINE:
        param = module._parameters.get(name)
        if param is not None and param.dtype in (torch.float16, torch.bfloat16):
            originals[name] = param
            module._parameters[name] = param.float()  # type: ignore[assignment]  # differentiable
    setattr(module, _SWAPPED, originals)


def _restore(module: nn.Module, args: Any, output: Any) -> None:
    originals: dict[str, nn.Parameter] = module.__dict__.pop(_SWAPPED, {})
    for name, param in originals.items():
        module._parameters[name] = param


def batchnorm_in_fp32(model: nn.Module) -> list[RemovableHandle]:
    """Install the two hooks on every BatchNorm layer of `model` (the engine's module); call
    AFTER deepspeed.initialize. Returns the handles, for removal at teardown."""
    handles: list[RemovableHandle] = []
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            handles.append(module.register_forward_pre_hook(_present_fp32))
            handles.append(module.register_forward_hook(_restore, prepend=True, always_call=True))
    return handles
