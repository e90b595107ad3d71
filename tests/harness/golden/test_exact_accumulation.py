"""Half-precision GEMMs accumulated exactly (harness.golden.exact_accumulation): under the mode a
half GEMM equals its float64 product of the half-rounded operands, rounded once, computed here
independently; autocast's fp32 operands are rounded to its half dtype first; gradients follow;
anything else passes through untouched."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness.golden.exact_accumulation import ExactAccumulation


def _operands(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(shape, generator=generator) for shape in ((16, 64), (8, 64), (8,)))
    return x.to(dtype), w.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_linear_is_the_correctly_rounded_product(dtype: torch.dtype) -> None:
    x, w, b = _operands(dtype)
    expected = (x.double() @ w.double().T + b.double()).to(dtype)
    with ExactAccumulation():
        got = F.linear(x, w, b)
        matmul = x @ w.T
    assert got.dtype == dtype and torch.equal(got, expected)
    assert torch.equal(matmul, (x.double() @ w.double().T).to(dtype))


def test_under_autocast_fp32_operands_are_rounded_to_its_half_dtype_first() -> None:
    x, w, b = _operands(torch.float32)
    expected = (x.bfloat16().double() @ w.bfloat16().double().T + b.bfloat16().double()).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16), ExactAccumulation():
        got = F.linear(x, w, b)
    assert got.dtype == torch.bfloat16 and torch.equal(got, expected)


def test_gradients_are_computed_exactly_and_rounded_to_the_operands_dtype() -> None:
    x, w, b = _operands(torch.float16)
    w.requires_grad_(True)
    upstream = torch.ones(16, 8, dtype=torch.float16)
    with ExactAccumulation():
        F.linear(x, w, b).backward(upstream)
    assert w.grad is not None and w.grad.dtype == torch.float16
    assert torch.equal(w.grad, (upstream.double().T @ x.double()).half())


def test_fp32_products_and_other_ops_pass_through_untouched() -> None:
    x, w, b = _operands(torch.float32)
    with ExactAccumulation():
        got = F.linear(x, w, b)
        summed = x.half().sum()
    assert got.dtype == torch.float32 and torch.equal(got, F.linear(x, w, b))
    assert torch.equal(summed, x.half().sum())
