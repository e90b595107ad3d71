"""The neutral checkpoint (docs/checkpoint-format.md) for the plain-torch strategies (single
device and DDP): weights and optimizer state are whole on every rank, so the main process writes
them and every rank reads them back. DeepSpeed's conversion is in deepspeed/state.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from accelerate_core.checkpoint import CheckpointReader, CheckpointWriter
from accelerate_core.checkpoint.optimizer_state import export_torch, import_torch
from accelerate_core.precision.base import Precision

# torch.amp.GradScaler.state_dict() key -> the neutral precision.json key
_SCALER_KEYS = {
    "scale": "scale",
    "_growth_tracker": "growth_tracker",
    "growth_factor": "growth_factor",
    "backoff_factor": "backoff_factor",
    "growth_interval": "growth_interval",
}


def save(
    writer: CheckpointWriter,
    model_states: Sequence[dict[str, torch.Tensor]],
    models: Sequence[nn.Module],
    optimizers: Sequence[Any],
    schedulers: Sequence[Any],
    precision: Precision,
) -> None:
    """`model_states`: each model's full state dict; `models`: the unwrapped modules."""
    scaler = scaler_to_neutral(precision.state_dict().get("scaler"))  # every rank: settles the step
    if not writer.is_main:
        return
    for i, state in enumerate(model_states):
        writer.model(i, state)
    for i, optimizer in enumerate(optimizers):
        writer.optimizer(i, export_torch(optimizer, models, f"optimizer {i}"))
    for i, scheduler in enumerate(schedulers):
        writer.scheduler(i, scheduler)
    writer.precision(precision.mixed_precision, scaler)


def load(
    reader: CheckpointReader,
    models: Sequence[nn.Module],
    optimizers: Sequence[Any],
    schedulers: Sequence[Any],
    precision: Precision,
) -> None:
    """`models`: the unwrapped modules (on their device)."""
    for i, model in enumerate(models):
        expected = {k: v.shape for k, v in model.state_dict().items()}
        model.load_state_dict(reader.model(i, expected))
    for i, optimizer in enumerate(optimizers):
        import_torch(optimizer, models, reader.optimizer(i), f"optimizer {i}")
    for i, scheduler in enumerate(schedulers):
        scheduler.load_state_dict(reader.scheduler(i))
    scaler = scaler_from_neutral(reader.precision().get("loss_scaler"))
    if scaler is not None:
        precision.load_state_dict({"scaler": scaler})


def scaler_to_neutral(state: dict[str, Any] | None) -> dict[str, Any] | None:
    if not state:
        return None
    return {
        neutral: (
            float(state[key]) if key in ("scale", "growth_factor", "backoff_factor") else int(state[key])
        )
        for key, neutral in _SCALER_KEYS.items()
        if key in state
    }


def scaler_from_neutral(neutral: dict[str, Any] | None) -> dict[str, Any] | None:
    if not neutral:
        return None
    return {key: neutral[name] for key, name in _SCALER_KEYS.items() if name in neutral}
