"""Hugging Face Accelerate as an implementation of the matrix: each cell mapped to Accelerate's
own API, its evidence read from what Accelerate built (docs/implementations.md).

The mapping, cell axis by axis: device cpu -> `Accelerator(cpu=True)`; precision ->
`mixed_precision` ("no", "fp16", "bf16"); the task's accumulation -> `gradient_accumulation_steps`;
zero1-3 -> `DeepSpeedPlugin(zero_stage=N)`; fsdp -> `FullyShardedDataParallelPlugin(fsdp_version=2)`;
a task that asks for synchronised BatchNorm gets `torch.nn.SyncBatchNorm.convert_sync_batchnorm`
before `prepare`, as an Accelerate user writes it (Accelerate has no switch for it).

Accelerate has no observer interface, so the harness's recorder hears of each prepare, backward,
optimizer step, gather and state dict through wrappers installed on this one Accelerator
(accelerate_shim.py); the user loop's `optimizer.is_overflow` reads Accelerate's
`optimizer.step_was_skipped`. Nothing else is changed: where Accelerate does something else than
the core (its `backward` divides the loss by `gradient_accumulation_steps` itself), the cell
shows it, and matrix.toml declares it with its cause.

Process-wide state: Accelerate keeps `AcceleratorState` and `GradientState` as singletons, and a
second Accelerator in a process with another `mixed_precision` is refused. There is no public call
to reset them; `free` uses their `_reset_state()` (documented as internal), keeping
`PartialState` and so the process group that the cells of a launch share.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

from accelerate_core.evidence.deepspeed import deepspeed_evidence
from accelerate_core.evidence.fsdp import fsdp_evidence
from accelerate_core.evidence.what_ran import backend_that_ran, parameter_device, process_group_size
from accelerate_core.observers import Observer
from harness.implementations.accelerate_shim import install
from harness.implementations.base import Adapter, CellSettings
from harness.tasks.base import Task


class AccelerateAdapter(Adapter):
    name = "accelerate"
    gathers_dataclasses = False

    def build(self, task: Task, settings: CellSettings, observers: Sequence[Observer]) -> Any:
        from accelerate import Accelerator, DeepSpeedPlugin, FullyShardedDataParallelPlugin

        options: dict[str, Any] = {"cpu": settings.cpu, "mixed_precision": settings.mixed_precision,
                                   "gradient_accumulation_steps": task.gradient_accumulation_steps}
        if settings.zero_stage is not None:
            options["deepspeed_plugin"] = DeepSpeedPlugin(zero_stage=settings.zero_stage)
        if settings.fsdp:
            options["fsdp_plugin"] = FullyShardedDataParallelPlugin(fsdp_version=2)
        accelerator = Accelerator(**options)
        install(accelerator, observers, sync_batchnorm=bool(getattr(task, "sync_batchnorm", False)))
        return accelerator

    def what_ran(self, accelerator: Any, model: nn.Module) -> dict[str, Any]:
        import accelerate

        engine = _engine(model)
        evidence: dict[str, Any] = {
            # What Accelerate decided it is running (its DistributedType), beside what the model shows.
            "strategy_class": f"accelerate {_distributed_type(accelerator)}",
            "strategy": backend_that_ran(model, engine),
            "model_class": type(model).__name__,
            "world_size": process_group_size(),
            "device": parameter_device(model),
            "emulated": False,  # Accelerate has no emulated path: it runs what it runs
            "core_path": str(Path(accelerate.__file__).resolve().parent),
        }
        if engine is not None:
            evidence["deepspeed"] = deepspeed_evidence(engine)
        sharded = fsdp_evidence(None, model)
        if sharded is not None:
            evidence["fsdp"] = sharded
        return evidence

    def owns_gradients(self, accelerator: Any) -> bool:
        return getattr(accelerator, "deepspeed_engine_wrapped", None) is not None

    def loss_scale(self, accelerator: Any) -> float | None:
        if accelerator.scaler is not None:
            return float(accelerator.scaler.get_scale())
        wrapped = getattr(accelerator, "deepspeed_engine_wrapped", None)
        optimizer = getattr(getattr(wrapped, "engine", None), "optimizer", None)
        scale = getattr(optimizer, "cur_scale", None) if optimizer is not None else None
        return float(scale) if scale is not None else None

    def ran_as(self, accelerator: Any) -> tuple[str, bool]:
        return f"accelerate:{_distributed_type(accelerator)}", False

    def free(self, accelerator: Any) -> None:
        from accelerate.state import AcceleratorState, GradientState

        accelerator.free_memory()
        AcceleratorState._reset_state(reset_partial_state=False)
        GradientState._reset_state()


def _engine(model: nn.Module) -> Any:
    """The DeepSpeed engine when Accelerate made the model one (read from the object's class)."""
    if type(model).__name__ == "DeepSpeedEngine":
        return model
    return None


def _distributed_type(accelerator: Any) -> str:
    kind = accelerator.distributed_type
    return str(getattr(kind, "value", kind))
