"""Evidence that DeepSpeed ran, read from the engine after it parsed its config and trained:
its own ZeRO stage, how many parameters ZeRO-3 really partitioned (and this rank's elements
against the full ones), the config keys that decide partitioning, precision and clipping, and
the settings in force, defaults included (`in_force`).
"""

from __future__ import annotations

from typing import Any

# The DeepSpeed config keys worth recording: what decides partitioning, precision, clipping.
_CONFIG_KEYS = ("zero_optimization", "fp16", "bf16", "gradient_clipping", "zero_allow_untested_optimizer")


def deepspeed_evidence(engine: Any) -> dict[str, Any]:
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
