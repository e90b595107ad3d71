"""Evidence of what ran, gathered on the rank from the objects themselves, never from the
cell's request: the strategy object and world size, the DeepSpeed engine's ZeRO stage and how
many parameters it really partitioned, the config in force (as the engine parsed it, defaults
included), the dtype the task's autocast site (the first module autocast acts on) computed in and
the dtype of the gradient that flowed back into it, and how gradients were reduced
(harness.rank.collectives). The judge (harness.truth.evidence) checks it against the cell before any number.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

import accelerate_core
from accelerate_core import Accelerator
from harness.rank.fsdp_evidence import fsdp_evidence
from harness.truth.autocast_site import AutocastSite, floating_output, no_site_statement

# The DeepSpeed config keys worth recording: what decides partitioning, precision, clipping.
_CONFIG_KEYS = ("zero_optimization", "fp16", "bf16", "gradient_clipping", "zero_allow_untested_optimizer")


@contextmanager
def watching_activations(model: nn.Module, seen: dict[str, Any], site: AutocastSite | None) -> Iterator[None]:
    """Record, in the first forward, the dtype the task's autocast site (harness.truth.autocast_site:
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


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _inner(model: nn.Module) -> nn.Module:
    return getattr(model, "module", model)  # DDP and the DeepSpeed engine wrap the user's module


def what_ran(accelerator: Accelerator, model: nn.Module) -> dict[str, Any]:
    """What ran, read from the objects that ran: the backend from the prepared model's wrapper (or
    the engine's own ZeRO stage), the world size from the process group, the device from where the
    parameters are. The strategy object is recorded beside it, so that a core whose strategy says
    one thing while the model runs another is seen as that."""
    strategy = accelerator.strategy
    engine = getattr(strategy, "engine", None)  # only the DeepSpeed strategy has one
    evidence: dict[str, Any] = {
        "strategy_class": type(strategy).__name__,
        "strategy": _backend_that_ran(model, engine),
        "model_class": type(model).__name__,
        "world_size": _process_group_size(),
        "device": _parameter_device(model),
        "emulated": strategy.emulated,
        # Which copy of the core ran (`python -m harness sensitivity` runs patched copies).
        "core_path": str(Path(accelerate_core.__file__).resolve().parent),
    }
    if engine is not None:
        evidence["deepspeed"] = _deepspeed_evidence(engine)
    sharded = fsdp_evidence(strategy, model)
    if sharded is not None:
        evidence["fsdp"] = sharded
    return evidence


def _backend_that_ran(model: nn.Module, engine: Any) -> str:
    """zero1-3 from the engine's own ZeRO stage, ddp when the model is wrapped in
    DistributedDataParallel, fsdp when fully_shard made the model an FSDP module (FSDP2 has no
    wrapper: the class of the model itself changes), single otherwise."""
    from torch.distributed.fsdp import FSDPModule

    if engine is not None:
        return f"zero{int(engine.zero_optimization_stage())}"
    if isinstance(model, nn.parallel.DistributedDataParallel):
        return "ddp"
    if isinstance(model, FSDPModule):
        return "fsdp"
    return "single"


def _process_group_size() -> int:
    """The default process group's size; 1 when no group exists (one process needs none)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _parameter_device(model: nn.Module) -> str:
    """The device type the parameters live on ("none" for a model without parameters); several
    types joined by "+" (a model split across devices is not what any cell asks for)."""
    types = sorted({param.device.type for param in model.parameters()})
    return "+".join(types) or "none"


def _deepspeed_evidence(engine: Any) -> dict[str, Any]:
    partitioned = full_elements = local_elements = 0
    parameters = list(engine.module.parameters())
    for param in parameters:
        full = int(getattr(param, "ds_numel", param.numel()))
        sharded = hasattr(param, "ds_tensor")  # ZeRO-3 gave it a shard of its own on this rank
        full_elements += full
        local_elements += int(param.ds_tensor.numel()) if sharded else full
        # Partitioned: the full tensor was released and only the shard remains (a 1-element
        # parameter still has a 1-element shard, padded, so the shard's size alone cannot say).
        partitioned += int(sharded and param.data.numel() < full)
    config = engine.config if isinstance(getattr(engine, "config", None), dict) else {}
    return {
        "in_force": _in_force(engine),
        "zero_stage": int(engine.zero_optimization_stage()),
        "parameters": len(parameters),
        "partitioned_parameters": partitioned,
        "full_elements": full_elements,
        "trainable_elements": sum(int(getattr(p, "ds_numel", p.numel()))
                                  for p in parameters if p.requires_grad),
        "local_elements": local_elements,
        "config": {k: config[k] for k in _CONFIG_KEYS if k in config},
    }


def _in_force(engine: Any) -> dict[str, Any]:
    """What the engine will actually do, read back from the engine after it parsed its config:
    DeepSpeed fills in a default for every key the config left out, and a default (gradient
    clipping, a loss-scale window, a persistence threshold) trains differently from the plain loop
    just as much as a written value does."""
    ds_config = getattr(engine, "_config", None)
    zero = getattr(ds_config, "zero_config", None)
    values: dict[str, Any] = {
        "gradient_clipping": float(engine.gradient_clipping()),
        "fp16_enabled": bool(engine.fp16_enabled()),
        "bf16_enabled": bool(engine.bfloat16_enabled()),
        "gradient_accumulation_steps": int(engine.gradient_accumulation_steps()),
        "train_micro_batch_size_per_gpu": int(engine.train_micro_batch_size_per_gpu()),
        "optimizer_clip_grad": float(getattr(engine.optimizer, "clip_grad", 0.0) or 0.0),
    }
    if zero is not None:
        values["stage3_param_persistence_threshold"] = int(zero.param_persistence_threshold)
        values["reduce_scatter"] = bool(zero.reduce_scatter)
    if values["fp16_enabled"]:
        values["initial_dynamic_scale"] = float(engine.initial_dynamic_scale())
        values["dynamic_loss_scale"] = bool(engine.dynamic_loss_scale())
    return values
