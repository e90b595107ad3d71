"""Collectives over nested structures: tensors inside dicts, lists, tuples and dataclasses.

The user's model returns whatever it likes (the user loop gathers a model-output dataclass), so
every function here walks the structure, applies a per-tensor operation and rebuilds the same
container types. Non-tensor leaves (None, numbers, strings) are passed through unchanged. Any
other object is refused by the collectives with the path to it (UnsupportedObjectError): walked
past, the tensors it holds would stay each process's own, and the caller would read one
process's predictions as everyone's (Hugging Face Accelerate raises a TypeError there too).
`send_to_device` still passes such objects through, as a batch may carry them.
Without a process group (one process) the collectives are identities, except that a 0-dim tensor
still gathers to shape [1], so results have the same shape rule at every world size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist

from accelerate_core.errors import InvalidSettingError, UnsupportedObjectError, explain

REDUCTIONS = ("sum", "mean")
# Leaves a collective passes through unchanged: they hold no tensor to gather or reduce.
_PLAIN_LEAVES = (type(None), bool, int, float, complex, str, bytes)


def map_tensors(fn: Callable[[torch.Tensor], Any], data: Any) -> Any:
    """Apply `fn` to every tensor in `data`, rebuilding dicts/lists/tuples/dataclasses."""
    if isinstance(data, torch.Tensor):
        return fn(data)
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        values = {f.name: map_tensors(fn, getattr(data, f.name)) for f in dataclasses.fields(data) if f.init}
        return type(data)(**values)
    if isinstance(data, Mapping):
        mapped = {k: map_tensors(fn, v) for k, v in data.items()}
        try:
            return type(data)(mapped)  # type: ignore[call-arg]
        except TypeError:
            return mapped
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(map_tensors(fn, v) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(map_tensors(fn, v) for v in data)
    return data


def _unreachable(data: Any, path: str) -> tuple[str, Any] | None:
    """The first leaf of `data` that is neither a tensor nor a plain value, with its path."""
    if isinstance(data, (torch.Tensor, *_PLAIN_LEAVES)):
        return None
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        children: list[tuple[str, Any]] = [(f".{f.name}", getattr(data, f.name))
                                           for f in dataclasses.fields(data) if f.init]
    elif isinstance(data, Mapping):
        children = [(f"[{key!r}]", value) for key, value in data.items()]
    elif isinstance(data, (list, tuple)):
        children = [(f"[{index}]", value) for index, value in enumerate(data)]
    else:
        return path, data
    for suffix, child in children:
        found = _unreachable(child, path + suffix)
        if found is not None:
            return found
    return None


def _collective(name: str, fn: Callable[[torch.Tensor], Any], data: Any) -> Any:
    """map_tensors for a collective: every process must reach every tensor, so an object the walk
    cannot enter is an error, never a silent pass-through."""
    found = _unreachable(data, "data")
    if found is not None:
        path, leaf = found
        raise UnsupportedObjectError(explain(
            f"accelerator.{name}: {path} is a {type(leaf).__module__}.{type(leaf).__qualname__}",
            f"{name} reaches tensors only inside dicts, lists, tuples, namedtuples and dataclasses; "
            "passed through, the tensors this object holds would stay each process's own",
            "a tensor, or those containers of tensors (None, numbers and strings pass unchanged)",
            "make the model return a dataclass or a dict (a Hugging Face model output is both), or pass "
            "the tensors themselves, e.g. accelerator.gather(output.logits)"))
    return map_tensors(fn, data)


def send_to_device(data: Any, device: torch.device) -> Any:
    non_blocking = device.type == "cuda"
    return map_tensors(lambda t: t.to(device, non_blocking=non_blocking), data)


def _world() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _gather_one(tensor: torch.Tensor) -> torch.Tensor:
    tensor = tensor.detach()
    if tensor.ndim == 0:
        tensor = tensor.reshape(1)
    world = _world()
    if world == 1:
        return tensor
    tensor = tensor.contiguous()
    # gloo has no all_gather for every dtype (bool, half types on older builds): travel as a
    # wider type and come back as the caller's dtype.
    wire = tensor
    if dist.get_backend() == "gloo" and tensor.dtype in (torch.bool, torch.float16, torch.bfloat16):
        wire = tensor.to(torch.float32) if tensor.is_floating_point() else tensor.to(torch.uint8)
    parts = [torch.empty_like(wire) for _ in range(world)]
    dist.all_gather(parts, wire)
    return torch.cat(parts, dim=0).to(tensor.dtype)


def gather(data: Any, caller: str = "gather") -> Any:
    """Concatenate every rank's tensors along dim 0, in rank order (a collective). `caller` names
    the Accelerator method in an error.

    Shapes must agree across ranks in every dimension: call pad_across_processes first when
    ranks hold different lengths.
    """
    return _collective(caller, _gather_one, data)


def _check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise InvalidSettingError(
            explain(f"reduction={reduction!r}", "it is not a reduction the core knows", REDUCTIONS,
                    "pass reduction='sum' or reduction='mean'")
        )


def reduce(data: Any, reduction: str = "mean") -> Any:
    """Element-wise sum or mean of every tensor over all ranks (a collective)."""
    _check_reduction(reduction)
    world = _world()

    def one(tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.detach().clone()
        if world > 1:
            wire = out.to(torch.float32) if out.dtype in (torch.float16, torch.bfloat16) else out
            dist.all_reduce(wire, op=dist.ReduceOp.SUM)
            out = wire.to(tensor.dtype)
        if reduction == "mean":
            out = out / world
        return out

    return _collective("reduce", one, data)


def pad_across_processes(data: Any, dim: int = 0, pad_index: int | float = 0, pad_first: bool = False) -> Any:
    """Pad every tensor along `dim` to the largest size any rank holds (a collective)."""
    world = _world()

    def one(tensor: torch.Tensor) -> torch.Tensor:
        if world == 1 or tensor.ndim == 0:
            return tensor
        if not -tensor.ndim <= dim < tensor.ndim:
            raise InvalidSettingError(
                explain(f"dim={dim} for a tensor of shape {tuple(tensor.shape)}", "no such dimension",
                        f"-{tensor.ndim}..{tensor.ndim - 1}", "pass a dimension the tensors have")
            )
        d = dim % tensor.ndim
        size = torch.tensor([tensor.shape[d]], device=tensor.device)
        sizes = [torch.zeros_like(size) for _ in range(world)]
        dist.all_gather(sizes, size)
        longest = int(max(s.item() for s in sizes))
        if tensor.shape[d] == longest:
            return tensor
        shape = list(tensor.shape)
        shape[d] = longest
        out = tensor.new_full(shape, pad_index)
        index = [slice(None)] * tensor.ndim
        index[d] = slice(longest - tensor.shape[d], longest) if pad_first else slice(0, tensor.shape[d])
        out[tuple(index)] = tensor
        return out

    return _collective("pad_across_processes", one, data)


def truncate(data: Any, full_length: int, keep: int) -> Any:
    """Keep the first `keep` rows of every tensor whose dim 0 has `full_length` rows (the
    per-sample leaves of a gathered last batch); other tensors pass unchanged."""

    def one(tensor: torch.Tensor) -> torch.Tensor:
        return tensor[:keep] if tensor.ndim >= 1 and tensor.shape[0] == full_length else tensor

    return map_tensors(one, data)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    if _world() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]
