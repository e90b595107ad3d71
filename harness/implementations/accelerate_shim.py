"""The recording shim for Hugging Face Accelerate: wrappers installed on one Accelerator (and the
optimizers it prepares) that tell observers (accelerate_core/observers.py) of each prepare,
backward, optimizer step, gather and state dict, in the order the core's own Accelerator does:
"before" hooks in registration order, "after" hooks in reverse.

Only this Accelerator instance is touched (instance attributes shadow its methods); the library
is never patched, and the wrappers go with the instance. The one name added is
`optimizer.is_overflow`, the core's name for Accelerate's `optimizer.step_was_skipped`, read after
each step, so that the same user loop runs on both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from accelerate_core.observers import Observer


def install(accelerator: Any, observers: Sequence[Observer], *, sync_batchnorm: bool = False) -> None:
    watchers = list(observers)
    prepare, backward = accelerator.prepare, accelerator.backward
    gather, gather_for_metrics = accelerator.gather, accelerator.gather_for_metrics
    get_state_dict = accelerator.get_state_dict

    def prepared(*objects: Any, **kwargs: Any) -> Any:
        if sync_batchnorm:  # what an Accelerate user writes: Accelerate has no switch for it
            convert = torch.nn.SyncBatchNorm.convert_sync_batchnorm
            objects = tuple(convert(o) if isinstance(o, nn.Module) else o for o in objects)
        out = prepare(*objects, **kwargs)
        results = out if isinstance(out, tuple) else (out,)
        for obj in results:
            if hasattr(obj, "step_was_skipped"):  # an AcceleratedOptimizer
                _watch_steps(accelerator, obj, watchers)
        for observer in watchers:
            observer.on_prepare(accelerator, results)
        return out

    def backwarded(loss: torch.Tensor, **kwargs: Any) -> None:
        for observer in watchers:
            observer.before_backward(accelerator, loss)
        backward(loss, **kwargs)
        for observer in reversed(watchers):
            observer.after_backward(accelerator, loss)

    inside_gather = [False]  # Accelerate's gather_for_metrics calls self.gather: told once, the outer

    def gathered(function: Any) -> Any:
        def gather_and_tell(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if inside_gather[0]:
                return function(tensor, *args, **kwargs)
            inside_gather[0] = True
            try:
                result = function(tensor, *args, **kwargs)
            finally:
                inside_gather[0] = False
            for observer in watchers:
                observer.on_gather(accelerator, result)
            return result
        return gather_and_tell

    def state_dict_of(model: nn.Module, unwrap: bool = True) -> dict[str, torch.Tensor]:
        result: dict[str, torch.Tensor] = get_state_dict(model, unwrap=unwrap)
        for observer in watchers:
            observer.on_state_dict(accelerator, model, result)
        return result

    accelerator.prepare = prepared
    accelerator.backward = backwarded
    accelerator.gather = gathered(gather)
    accelerator.gather_for_metrics = gathered(gather_for_metrics)
    accelerator.get_state_dict = state_dict_of


def _watch_steps(accelerator: Any, optimizer: Any, watchers: list[Observer]) -> None:
    step = optimizer.step
    optimizer.is_overflow = False

    def stepped(*args: Any, **kwargs: Any) -> Any:
        for observer in watchers:
            observer.before_optimizer_step(accelerator, optimizer)
        result = step(*args, **kwargs)
        optimizer.is_overflow = bool(optimizer.step_was_skipped)
        for observer in reversed(watchers):
            observer.after_optimizer_step(accelerator, optimizer, optimizer.is_overflow)
        return result

    optimizer.step = stepped
