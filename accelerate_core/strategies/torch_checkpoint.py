"""Checkpoint layout of the plain-torch strategies (single device and DDP).

Model weights are replicated on every rank, so the main process writes one file per object and
every rank reads them back. DeepSpeed shards its state and has its own layout (deepspeed.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accelerate_core.checkpointing import atomic_save
from accelerate_core.errors import ConfigFileError, explain
from accelerate_core.precision.base import Precision


def save(directory: Path, process: Any, model_states: Sequence[dict[str, torch.Tensor]],
         optimizers: Sequence[Any], schedulers: Sequence[Any], precision_state: dict[str, Any],
         extra: dict[str, Any]) -> None:
    if process.is_main_process:
        for i, state in enumerate(model_states):
            atomic_save(state, directory / f"model_{i}.pt")
        for i, optimizer in enumerate(optimizers):
            atomic_save(optimizer.state_dict(), directory / f"optimizer_{i}.pt")
        for i, scheduler in enumerate(schedulers):
            atomic_save(scheduler.state_dict(), directory / f"scheduler_{i}.pt")
        atomic_save(precision_state, directory / "precision.pt")
        atomic_save(extra, directory / "extra.pt")
    process.barrier()


def load(directory: Path, device: torch.device, models: Sequence[nn.Module], optimizers: Sequence[Any],
         schedulers: Sequence[Any], precision: Precision) -> dict[str, Any]:
    def read(name: str) -> Any:
        path = directory / name
        if not path.exists():
            raise ConfigFileError(
                explain(
                    f"checkpoint directory {str(directory)!r}",
                    f"it has no {name} (was it written by save_state with the same objects prepared?)",
                    "a directory written by Accelerator.save_state",
                    "pass the directory save_state wrote, with the same models/optimizers/schedulers",
                )
            )
        return torch.load(path, map_location=device, weights_only=False)

    for i, model in enumerate(models):
        model.load_state_dict(read(f"model_{i}.pt"))
    for i, optimizer in enumerate(optimizers):
        optimizer.load_state_dict(read(f"optimizer_{i}.pt"))
    for i, scheduler in enumerate(schedulers):
        scheduler.load_state_dict(read(f"scheduler_{i}.pt"))
    precision.load_state_dict(read("precision.pt"))
    extra: dict[str, Any] = read("extra.pt")
    return extra
