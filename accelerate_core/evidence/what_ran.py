"""`what_ran(accelerator, model)`: the backend, world size and device of a run, read from the
objects that ran: the backend from the prepared model's wrapper (or the DeepSpeed engine's own
ZeRO stage), the world size from the process group, the device from where the parameters are,
the engine's settings in force (evidence/deepspeed.py) and FSDP2's sharding (evidence/fsdp.py).
The strategy object is recorded beside them, so that a core whose strategy says one thing while
the model runs another is seen as that. `precision_in_use(accelerator)`: the precision object the
strategy holds and whether a loss scaler (GradScaler or the engine's) is in use.

Typed `Any` for the Accelerator: this module is read by the Accelerator's observers and must not
import the facade (no import cycle, not even a type-only one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from accelerate_core.evidence.deepspeed import deepspeed_evidence
from accelerate_core.evidence.fsdp import fsdp_evidence

# Which copy of the core ran (a tool may run patched copies of it side by side).
CORE_PATH = str(Path(__file__).resolve().parent.parent)


def what_ran(accelerator: Any, model: nn.Module | None) -> dict[str, Any]:
    """`model`: the prepared model that trained (None when none was prepared: the backend,
    device and class then read "none", nothing having run that could say more)."""
    strategy = accelerator.strategy
    engine = getattr(strategy, "engine", None)  # only the DeepSpeed strategy has one
    evidence: dict[str, Any] = {
        "strategy_class": type(strategy).__name__,
        "strategy": backend_that_ran(model, engine),
        "model_class": type(model).__name__ if model is not None else "none",
        "world_size": process_group_size(),
        "device": parameter_device(model),
        "emulated": strategy.emulated,
        "core_path": CORE_PATH,
    }
    if engine is not None:
        evidence["deepspeed"] = deepspeed_evidence(engine)
    sharded = fsdp_evidence(strategy, model) if model is not None else None
    if sharded is not None:
        evidence["fsdp"] = sharded
    return evidence


def precision_in_use(accelerator: Any) -> dict[str, Any]:
    """The mixed precision of the precision object the strategy runs with ("no", "fp16",
    "bf16"), and whether a loss scale exists (amp's GradScaler or the DeepSpeed engine's)."""
    return {"mixed_precision": accelerator.strategy.precision.mixed_precision,
            "loss_scaling": accelerator.strategy.loss_scale() is not None}


def backend_that_ran(model: nn.Module | None, engine: Any) -> str:
    """zero1-3 from the engine's own ZeRO stage, ddp when the model is wrapped in
    DistributedDataParallel, fsdp when fully_shard made the model an FSDP module (FSDP2 has no
    wrapper: the class of the model itself changes), single otherwise."""
    from torch.distributed.fsdp import FSDPModule

    if engine is not None:
        return f"zero{int(engine.zero_optimization_stage())}"
    if model is None:
        return "none"
    if isinstance(model, nn.parallel.DistributedDataParallel):
        return "ddp"
    if isinstance(model, FSDPModule):
        return "fsdp"
    return "single"


def process_group_size() -> int:
    """The default process group's size; 1 when no group exists (one process needs none)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def parameter_device(model: nn.Module | None) -> str:
    """The device type the parameters live on ("none" for a model without parameters); several
    types joined by "+" (a model split across devices is not what any backend of the core does)."""
    types = sorted({param.device.type for param in model.parameters()}) if model is not None else []
    return "+".join(types) or "none"
