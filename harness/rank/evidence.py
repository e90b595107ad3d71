"""Evidence of what ran, gathered on the rank from the objects themselves, never from the
cell's request: the strategy object and world size, the DeepSpeed engine's ZeRO stage and how
many parameters it really partitioned, the config in force, and the dtype the first Linear layer
computed in. The judge (harness.truth.evidence) checks it against the cell before any number.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from accelerate_core import Accelerator

# The DeepSpeed config keys worth recording: what decides partitioning, precision, clipping.
_CONFIG_KEYS = ("zero_optimization", "fp16", "bf16", "gradient_clipping", "zero_allow_untested_optimizer")


@contextmanager
def watching_activations(model: nn.Module, seen: dict[str, Any]) -> Iterator[None]:
    """Record the dtype of the first Linear layer's output and weight in the first forward.

    Linear is where autocast and DeepSpeed's half-precision casts act; a task without one (a
    scalar model) records nothing and is judged without this piece of evidence."""
    linear = next((m for m in _modules(model) if isinstance(m, nn.Linear)), None)
    if linear is None:
        yield
        return

    def hook(module: nn.Module, _inputs: Any, output: Any) -> None:
        if "activation_dtype" not in seen and isinstance(output, torch.Tensor):
            seen["activation_dtype"] = str(output.dtype).removeprefix("torch.")
            seen["weight_dtype"] = str(module.weight.dtype).removeprefix("torch.")

    handle = linear.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _modules(model: nn.Module) -> Iterator[nn.Module]:
    inner = getattr(model, "module", model)  # DDP and the DeepSpeed engine wrap the user's module
    return inner.modules()


def what_ran(accelerator: Accelerator) -> dict[str, Any]:
    strategy = accelerator.strategy
    evidence: dict[str, Any] = {
        "strategy_class": type(strategy).__name__,
        "strategy": strategy.registered_name,
        "world_size": accelerator.num_processes,
        "device": accelerator.device.type,
        "emulated": strategy.emulated,
    }
    engine = getattr(strategy, "engine", None)  # only the DeepSpeed strategy has one
    if engine is not None:
        evidence["deepspeed"] = _deepspeed_evidence(engine)
    return evidence


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
        "zero_stage": int(engine.zero_optimization_stage()),
        "parameters": len(parameters),
        "partitioned_parameters": partitioned,
        "full_elements": full_elements,
        "local_elements": local_elements,
        "config": {k: config[k] for k in _CONFIG_KEYS if k in config},
    }
