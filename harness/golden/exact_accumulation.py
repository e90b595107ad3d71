"""Half-precision matrix products accumulated exactly, for `harness calibrate` only.

A half-precision GEMM (fp16/bf16 operands) accumulates its products in fp32 and rounds the sum to
half once. Another kernel (another CPU's, another thread split, another blocking) accumulates in
another order: the fp32 sums differ in their last bits, and where a sum lies close to a rounding
boundary of the half dtype, its half result differs by one unit in the last place. Computing
every such product in float64 (the products of half operands are exact there, and so, for the
tasks' short dot products, is their sum) and rounding once gives the correctly rounded result:
what any fp32-accumulating kernel is compared with, so the distance to it measures how much a
different accumulation order can move a run, on any CPU, without needing that CPU.

Used as a calibration variant of a backend's own-semantics reference (harness.calibrate.
semantics_noise); never to make a golden.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

HALF_DTYPES = (torch.float16, torch.bfloat16)
# The matrix products the tasks' models run (nn.Linear, and `@` / torch.matmul in attention).
GEMMS: frozenset[Callable[..., Any]] = frozenset({F.linear, torch.matmul, torch.Tensor.__matmul__})


class ExactAccumulation(TorchFunctionMode):
    """Every half-precision GEMM (half operands, or fp32 operands under a half CPU autocast, which
    would round them to half) computed in float64 from the half-rounded operands and rounded to
    the half dtype once. Gradients follow: autograd differentiates the float64 product, so the
    backward GEMMs are exact too, their results rounded to the operands' half dtype."""

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        half = _half_dtype(func, args)
        if half is None:
            return func(*args, **kwargs)
        with torch.autocast("cpu", enabled=False):
            wide = [a.to(half).double() if isinstance(a, torch.Tensor) else a for a in args]
            product = torch.matmul(*wide) if func is torch.Tensor.__matmul__ else func(*wide, **kwargs)
            return product.to(half)


def _half_dtype(func: Callable[..., Any], args: tuple[Any, ...]) -> torch.dtype | None:
    """The half dtype this call would compute in; None: not a half-precision GEMM."""
    if func not in GEMMS:
        return None
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not tensors or not all(t.is_floating_point() for t in tensors):
        return None
    if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") in HALF_DTYPES:
        if all(t.dtype == torch.float32 or t.dtype in HALF_DTYPES for t in tensors):
            return torch.get_autocast_dtype("cpu")
        return None
    dtypes = {t.dtype for t in tensors}
    return tensors[0].dtype if len(dtypes) == 1 and tensors[0].dtype in HALF_DTYPES else None
