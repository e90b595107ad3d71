"""Gradient clipping as DeepSpeed's ZeRO optimizers and FSDP2 compute it over sharded gradients,
in plain PyTorch, for the reduction-order reference only (harness.calibrate.reduction_order);
never used to make a golden.

torch.nn.utils.clip_grad_norm_ (the golden's clip) takes each parameter's fp32 norm, the norm of
those norms, and multiplies every gradient by max_norm / (norm + 1e-6), clamped at 1. The sharded
backends get the same quantity another way, so a clipped step differs from the golden's by an fp32
ulp or two (each style below made real cells bit-identical to the reference, 2 processes, torch
2.13.0, deepspeed 0.19.8; docs/calibration.md):
- FSDP2 ("fsdp"): the same torch function on DTensor gradients sharded on dim 0: each
  parameter's norm is a partial norm per rank, made whole as (sum of the ranks' squares) ** 0.5
  before the norm of those norms;
- ZeRO-1/2 ("zero12", deepspeed/runtime/zero/stage_1_and_2.py): the parameters flattened in order
  and cut into one equal partition per rank; each rank sums the squares of its partition's pieces
  in fp64, rounds the sum to fp32, the ranks' sums are all-reduced in fp32 and the root taken there;
- ZeRO-3 ("zero3", stage3.py): every parameter cut into one equal piece per rank (the last one
  zero-padded); each rank's sum of squares in fp64, all-reduced and rooted in fp64;
then both ZeRO styles divide every gradient by ((norm / loss_scale) + 1e-6) / max_norm, clamped
below at 1.
With a power-of-two loss scale, dividing the unscaled gradients by that clip alone gives the same
bits as DeepSpeed's one multiplication of the scaled ones, so the reference clips after unscaling,
as the golden does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

CLIP_STYLES = ("zero12", "zero3", "fsdp")


def clip_gradients(parameters: Sequence[torch.nn.Parameter], max_norm: float, style: str, ranks: int) -> None:
    """The reference's clip: torch.nn.utils.clip_grad_norm_ over whole gradients, as the golden
    clips, when `style` is ""; else as that backend clips on `ranks` processes."""
    if style:
        clip_as_backend(style, parameters, max_norm, ranks)
    else:
        torch.nn.utils.clip_grad_norm_(parameters, max_norm)


def clip_as_backend(style: str, parameters: Sequence[torch.nn.Parameter], max_norm: float,
                    ranks: int) -> None:
    """Clip the (unscaled, rank-averaged) gradients of `parameters` in place as `style` on `ranks`
    processes clips them."""
    if style not in CLIP_STYLES:
        raise ValueError(f"clip style {style!r}: valid: {CLIP_STYLES}")
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    if style == "fsdp":
        coefficient = torch.clamp(max_norm / (_fsdp_norm(grads, ranks) + 1e-6), max=1.0)
        for grad in grads:
            grad.mul_(coefficient)
        return
    norm = _NORMS[style](grads, ranks)
    # combine_grad_norm_groups: one parameter group, its norm stacked and normed again.
    invalid = bool((~torch.isfinite(norm) | (norm < 0)).any())
    combined = torch.linalg.vector_norm(torch.stack([norm]), ord=2)
    if invalid:
        combined = torch.full_like(combined, float("inf"))
    clip = torch.clamp(((combined / 1.0) + 1e-6) / max_norm, min=1.0)
    factor = 1. / (clip * 1.0)
    for grad in grads:
        grad.mul_(factor)


def _zero12_norm(grads: list[torch.Tensor], ranks: int) -> torch.Tensor:
    sums = []
    for pieces in zero12_partitions(grads, ranks):
        norms = [torch.linalg.vector_norm(p.to(torch.float64), ord=2.0) for p in pieces]
        sums.append(torch.stack(norms).pow(2.0).sum().float() if norms else torch.tensor(0.0))
    return _all_reduced(sums).pow(1. / 2.0)


def zero12_partitions(grads: list[torch.Tensor], ranks: int) -> list[list[torch.Tensor]]:
    """Each rank's pieces of the gradients: all of them flattened in order, padded to a multiple of
    2 x ranks elements (nccl_start_alignment_factor x the data-parallel size), cut into `ranks`
    equal partitions; the padding belongs to no piece."""
    total = sum(g.numel() for g in grads)
    alignment = 2 * ranks
    partition = math.ceil(total / alignment) * alignment // ranks
    out = []
    for rank in range(ranks):
        start, end = rank * partition, (rank + 1) * partition
        pieces, at = [], 0
        for grad in grads:
            flat = grad.reshape(-1)
            lo, hi = max(start, at), min(end, at + flat.numel())
            if lo < hi:
                pieces.append(flat[lo - at:hi - at])
            at += flat.numel()
        out.append(pieces)
    return out


def _zero3_norm(grads: list[torch.Tensor], ranks: int) -> torch.Tensor:
    sums = []
    for rank in range(ranks):
        norms = []
        for grad in grads:
            flat = grad.reshape(-1)
            size = math.ceil(flat.numel() / ranks)
            piece = flat[rank * size:(rank + 1) * size]
            if piece.numel() < size:  # the last rank's piece is zero-padded
                piece = torch.cat([piece, piece.new_zeros(size - piece.numel())])
            norms.append(piece.to(torch.float64).norm(2.0))
        sums.append(torch.sum(torch.pow(torch.stack(norms), 2.0)))
    total = _all_reduced(sums) ** (1. / 2.0)
    # stage3 masks an inf/nan norm with -1 in fp32; torch.where promotes to the fp64 norm's dtype
    return torch.where(total.isinf() | total.isnan(), torch.tensor(-1.0, dtype=torch.float), total)


def _fsdp_norm(grads: list[torch.Tensor], ranks: int) -> torch.Tensor:
    norms = []
    for grad in grads:
        shards = list(torch.chunk(grad, ranks, dim=0)) if grad.dim() else [grad]
        squares = [torch.linalg.vector_norm(shard, 2.0) ** 2.0 for shard in shards]  # _NormPartial
        norms.append(_all_reduced(squares) ** (1.0 / 2.0))
    return torch.linalg.vector_norm(torch.stack(norms), 2.0)


def _all_reduced(values: list[torch.Tensor]) -> torch.Tensor:
    """An all-reduce sum over the ranks' values, in rank order, in their dtype."""
    total = values[0].clone()
    for value in values[1:]:
        total = total + value
    return total


_NORMS: dict[str, Callable[[list[torch.Tensor], int], torch.Tensor]] = {
    "zero12": _zero12_norm, "zero3": _zero3_norm}
