"""0-dim parameters through deepspeed.initialize (DeepSpeed 0.19.8).

The engine broadcasts rank 0's weights at start-up (DeepSpeedEngine._broadcast_model) as
`dist.broadcast(p.data.view(torch.uint8), ...)`, which torch refuses for a 0-dim tensor ("self.dim()
cannot be 0 to view Float as Byte"), so any model with a scalar parameter (a learnt temperature,
a gate) fails to initialize under every ZeRO stage, reproduced with DeepSpeed alone. The rest of
ZeRO (flattening, partitioning, the optimizer step) handles such parameters.

The reconciliation keeps DeepSpeed's own broadcast (its groups, MoE handling, replicated-only
rule) and changes nothing the user sees: only during that one method, each 0-dim parameter's
`.data` is a 1-element view of the SAME storage, so DeepSpeed's in-place broadcast lands in the
parameter; the 0-dim tensor is put back before the method returns, before ZeRO flattens anything.
When a DeepSpeed version lacks the method, nothing is patched and its own behaviour shows.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

_LOCK = threading.Lock()  # the patch is on the class: one initialize at a time


def has_zero_dim_parameters(model: nn.Module) -> bool:
    return any(p.dim() == 0 for p in model.parameters())


def _broadcast_with_zero_dim_views(original: Callable[[Any], None]) -> Callable[[Any], None]:
    @functools.wraps(original)
    def broadcast_model(engine: Any) -> None:
        scalars = [p for p in engine.module.parameters() if p.dim() == 0]
        saved = [p.data for p in scalars]
        try:
            for param, data in zip(scalars, saved, strict=True):
                param.data = data.view(1)  # same storage: the broadcast writes the parameter
            original(engine)
        finally:
            for param, data in zip(scalars, saved, strict=True):
                param.data = data
    return broadcast_model


def _zero3_init_with_zero_dim_views(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """ZeRO-3's Init._zero_init_param: convert, broadcast from the group's first rank, partition.
    For a 0-dim parameter the same three steps, the broadcast through a 1-element view (the
    conversion must see the true shape first: it records ds_shape for every later gather)."""
    @functools.wraps(original)
    def zero_init_param(init: Any, param: Any) -> None:
        if param.dim() != 0:
            original(init, param)
            return
        from deepspeed import comm

        init._convert_to_deepspeed_param(param)
        group = init.get_partition_dp_group(param)
        source = 0 if comm.get_world_group() == group else comm.get_global_rank(group, 0)
        comm.broadcast(param.data.view(1).view(torch.uint8), source, group)
        param.partition()
    return zero_init_param


# Each patch applies only where its gate finds the behaviour it fixes in the installed release
# (and stays off where a release fixed it); the version sweep checks every gate against the
# behaviour's DeepSpeed-alone reproduction (harness/versions/behaviours.py, docs/versions.md).
_VIEWS_AS_BYTES = ".data.view(torch.uint8)"  # torch refuses this view for a 0-dim tensor


def _source_has(method: Callable[..., Any], *needles: str) -> bool:
    try:
        source = inspect.getsource(method)
    except (OSError, TypeError):  # no source to read (a compiled install): keep the patch
        return True
    return all(needle in source for needle in needles)


def _broadcast_views_parameters_as_bytes(method: Callable[..., Any]) -> bool:
    """The 0-dim start-up broadcast behaviour: the engine broadcasts each `p.data.view(uint8)`."""
    return _source_has(method, _VIEWS_AS_BYTES)


def _zero3_init_is_the_copied_body(method: Callable[..., Any]) -> bool:
    """The ZeRO-3 patch re-implements Init._zero_init_param's three steps: only valid where the
    release's body is those steps (convert, broadcast the byte view, partition)."""
    return _source_has(method, "_convert_to_deepspeed_param(param)", _VIEWS_AS_BYTES, "param.partition()")


def zero_dim_reconciliation_applies() -> bool:
    """Whether zero_dim_safe_initialize patches anything with the installed DeepSpeed."""
    from deepspeed.runtime.engine import DeepSpeedEngine

    method = DeepSpeedEngine.__dict__.get("_broadcast_model")
    return method is not None and _broadcast_views_parameters_as_bytes(method)


def zero3_hooks_miss_dataclass_outputs() -> bool:
    """Whether ZeRO-3's backward hooks skip the tensors inside a dataclass output (the walk they
    use, apply_to_tensors_only, looks into tuples, lists and dicts only): asked of the installed
    DeepSpeed directly, so the output reconciliation stays off in a release that looks inside."""
    import dataclasses

    from deepspeed.runtime.zero.utils import apply_to_tensors_only

    @dataclasses.dataclass
    class _Output:
        loss: torch.Tensor

    seen: list[torch.Tensor] = []

    def touch(tensor: torch.Tensor) -> torch.Tensor:
        seen.append(tensor)
        return tensor

    apply_to_tensors_only(touch, _Output(torch.zeros(1)))
    return not seen


@contextlib.contextmanager
def _patched(owner: type, name: str, wrap: Callable[[Any], Any],
             present: Callable[[Callable[..., Any]], bool]) -> Iterator[None]:
    original = owner.__dict__.get(name)
    if original is None or not present(original):  # another release: its own behaviour shows
        yield
        return
    setattr(owner, name, wrap(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def zero_dim_safe_initialize(model: nn.Module) -> Iterator[None]:
    """Around deepspeed.initialize(model=...): the start-up broadcasts (every stage's engine, and
    ZeRO-3's parameter conversion) accept 0-dim parameters. A no-op for models without them."""
    if not has_zero_dim_parameters(model):
        yield
        return
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero.partition_parameters import Init

    with _LOCK, _patched(DeepSpeedEngine, "_broadcast_model", _broadcast_with_zero_dim_views,
                         _broadcast_views_parameters_as_bytes), \
            _patched(Init, "_zero_init_param", _zero3_init_with_zero_dim_views,
                     _zero3_init_is_the_copied_body):
        yield


def restore_functional_linear() -> None:
    """Undo ZeRO-3's process-wide swap of torch.nn.functional.linear, if a config asked for it
    (`memory_efficient_linear`, off by default in the core): DeepSpeed leaves it in place after
    the engine is gone, so every later model in the process would compute differently."""
    from deepspeed.runtime.zero import partition_parameters

    original = getattr(partition_parameters.InsertPostInitMethodToModuleSubClasses, "linear_bk", None)
    if original is not None and torch.nn.functional.linear is not original:
        torch.nn.functional.linear = original
