"""Counting the collectives a rank calls while it trains, and checking that its gradients agree
with every other rank's: evidence that gradients really were reduced (harness.rank.recorder).

Two views, because the backends reach the process group by two roads:
- DeepSpeed calls `torch.distributed.all_reduce`, `reduce`, ... through Python at call time
  (deepspeed.comm.torch), so wrapping those attributes counts them; its reduce-scatter and
  all-gather go through functions its backend object took from torch.distributed when it was
  made, so those attributes of the backend object are wrapped too. Besides the calls, the
  elements each moved are summed: the one-element all-reduces of a gradient norm or an overflow
  flag must not pass for a gradient reduction.
- FSDP2 calls `torch.distributed.all_gather_single` / `reduce_scatter_single` through Python at
  call time too: counted the same way (its gradients are shards, different on every rank by
  design, so the agreement check below does not apply to it).
- DDP's reducer calls the process group from C++: nothing Python can wrap sees it. Its evidence
  is the result instead: after the backward of an accumulation boundary every rank must hold the
  very same gradients (an all-reduce leaves bit-identical sums on every rank; ranks that trained
  on different data without one hold different gradients).
"""

from __future__ import annotations

import functools
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

# The torch.distributed entry points a backend may reduce or gather gradients with.
# FSDP2 (torch 2.13) calls all_gather_single / reduce_scatter_single through torch.distributed at
# call time, so wrapping them counts its parameter gathers and gradient reduce-scatters.
COUNTED = ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "all_gather", "all_gather_into_tensor",
           "reduce", "broadcast", "all_to_all_single", "all_reduce_coalesced", "all_gather_single",
           "reduce_scatter_single")


class CollectiveCounter:
    """Counts calls per collective, but only between `start()` and `stop()` (the rank's recorder,
    harness.rank.recorder, opens a window around each backward and optimizer step, so the loss
    reduction for logging and its own gradient check are not counted)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.elements: Counter[str] = Counter()
        self._active = False

    @contextmanager
    def installed(self) -> Iterator[CollectiveCounter]:
        targets: list[tuple[Any, str, str]] = [(dist, name, name) for name in COUNTED if hasattr(dist, name)]
        backend = _deepspeed_backend()
        if backend is not None:
            targets += [(backend, attr, name) for attr, name in _DEEPSPEED_CACHED.items()
                        if getattr(backend, attr, None) is not None]
        originals = [(owner, attr, getattr(owner, attr)) for owner, attr, _name in targets]
        for (owner, attr, name), (_o, _a, original) in zip(targets, originals, strict=True):
            setattr(owner, attr, self._wrap(name, original))
        try:
            yield self
        finally:
            for owner, attr, original in originals:
                setattr(owner, attr, original)

    def start(self) -> None:
        """Count the calls from here (the rank's recorder starts before a backward or a step)."""
        self._active = True

    def stop(self) -> None:
        self._active = False

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if self._active:
                self.counts[name] += 1
                self.elements[name] += _largest_tensor(list(args) + list(kwargs.values()))
            return original(*args, **kwargs)

        return counted


# DeepSpeed's torch backend keeps these two torch.distributed functions as attributes of itself.
_DEEPSPEED_CACHED = {"reduce_scatter_function": "reduce_scatter_tensor",
                     "all_gather_function": "all_gather_into_tensor"}


def _deepspeed_backend() -> Any:
    """deepspeed.comm's backend object, if DeepSpeed is loaded and initialised its comm."""
    comm = sys.modules.get("deepspeed.comm.comm")
    return getattr(comm, "cdb", None) if comm is not None else None


def _largest_tensor(values: list[Any]) -> int:
    """Elements of the largest tensor among a collective's arguments (a list counts summed)."""
    sizes = [0]
    for value in values:
        if isinstance(value, torch.Tensor):
            sizes.append(value.numel())
        elif isinstance(value, (list, tuple)) and all(isinstance(v, torch.Tensor) for v in value):
            sizes.append(sum(v.numel() for v in value))
    return max(sizes)


def gradients_agree_across_ranks(model: nn.Module) -> bool | None:
    """True when every rank holds bit-identical gradients; None when there is nothing to check
    (one process, no process group, or no parameter with a gradient on this rank)."""
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad for p in params]
    # gloo gathers CPU tensors, NCCL device ones: gather where the parameters live.
    device = params[0].device if params else torch.device("cpu")
    # Per parameter: sum and sum of squares in float64, plus whether it had a gradient at all.
    rows = [torch.zeros(3, dtype=torch.float64) if g is None else torch.stack(
        [g.detach().double().sum(), g.detach().double().square().sum(), torch.ones((), dtype=torch.float64)])
        for g in grads]
    mine = (torch.stack(rows) if rows else torch.zeros(0, 3, dtype=torch.float64)).to(device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    if not rows or not bool(mine[:, 2].any()):
        return None
    return all(_same(mine, other) for other in everyone)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-equal, NaN included: on an fp16 step that overflowed every rank holds the same inf/NaN
    sums (the all-reduce spread them), and NaN != NaN must not read as disagreement."""
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(nan=0.0), b.nan_to_num(nan=0.0))
