"""Evidence of the dtypes a run computed in, seen by hooks on the model as it trains: the dtype the
task's autocast site (the first module autocast acts on) computed in, the dtype of its own
parameters, and the dtype of the gradient that flowed back into it. What ran (backend, engine,
sharding, world size, device) is the core's what_ran() (accelerate_core/evidence); the rank's
recorder (harness.rank.recorder) puts both in the record, and the judge (harness.judge.evidence_check)
checks them against the cell before any number.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from harness.judge.autocast_site import AutocastSite, floating_output, no_site_statement


@contextmanager
def watching_activations(model: nn.Module, seen: dict[str, Any], site: AutocastSite | None) -> Iterator[None]:
    """Record, in the first forward, the dtype the task's autocast site (harness.judge.autocast_site:
    the first module autocast acts on, found from the task's model) computed its output in and the
    dtype of its own floating parameters, and the dtype of the first gradient that flows back into
    the output of a module autocast acts on (the first may be frozen, with no gradient to see). A
    model autocast acts on nowhere records that, in words (`autocast_site`), and no dtype: there
    is nothing whose dtype could say which precision ran.

    The site is where autocast and DeepSpeed's half-precision casts show: a Linear layer in most
    tasks, the model itself where it computes with nn.functional.linear in its own forward."""
    if site is None:
        seen["autocast_site"] = no_site_statement(type(_inner(model)).__name__)
        yield
        return
    seen["autocast_site"] = site.describe()
    modules = dict(_inner(model).named_modules())
    first = modules.get(site.module)  # absent: no dtype is recorded, and the judge says so
    watched = {"gradient": False}

    def gradient_seen(grad: torch.Tensor) -> None:
        seen.setdefault("activation_grad_dtype", _name(grad.dtype))

    def hook(module: nn.Module, _inputs: Any, output: Any) -> None:
        tensor = floating_output(output)
        if tensor is None:
            return
        if module is first and "activation_dtype" not in seen:
            seen["activation_dtype"] = _name(tensor.dtype)
            own = next((p for p in module.parameters(recurse=False) if p.is_floating_point()), None)
            if own is not None:
                seen["weight_dtype"] = _name(own.dtype)
        if tensor.requires_grad and not watched["gradient"]:
            # A tensor hook, not a module backward hook: it adds no autograd node of its own
            # (DeepSpeed ZeRO-3 installs module hooks that a second layer could disturb). The
            # first forward may be one without gradients; the first that has them is watched.
            tensor.register_hook(gradient_seen)
            watched["gradient"] = True

    # prepend: before ZeRO-3's own forward hooks, which hand the caller aliases of the output's
    # tensors; the model's loss, computed inside its forward, was made from the originals, so a
    # gradient hook on the alias of a model's own output would never fire.
    handles = [modules[name].register_forward_hook(hook, prepend=True) for name in site.modules
               if name in modules]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def watching_evaluation(model: nn.Module, evidence: dict[str, Any],
                        site: AutocastSite | None) -> Iterator[None]:
    """Record the dtype the task's autocast site computed its output in during the first forward of
    evaluation (`eval_activation_dtype`; None when no evaluation forward reached it). Evaluation
    runs at the cell's precision as training does, and a core that autocasts only the training
    forward hands back eval outputs computed in fp32, which the golden's tolerance cannot tell from
    bf16 ones where a task's output is cast to fp32 anyway (docs/sensitivity.md,
    `autocast_in_training_only`). A model autocast acts on nowhere records nothing."""
    if site is None:
        yield
        return
    evidence["eval_activation_dtype"] = None
    first = dict(_inner(model).named_modules()).get(site.module)

    def hook(module: nn.Module, _inputs: Any, output: Any) -> None:
        tensor = floating_output(output)
        if tensor is not None and evidence["eval_activation_dtype"] is None:
            evidence["eval_activation_dtype"] = _name(tensor.dtype)

    # prepend: before ZeRO-3's own forward hooks, as in watching_activations.
    handle = None if first is None else first.register_forward_hook(hook, prepend=True)
    try:
        yield
    finally:
        if handle is not None:
            handle.remove()


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _inner(model: nn.Module) -> nn.Module:
    return getattr(model, "module", model)  # DDP and the DeepSpeed engine wrap the user's module
