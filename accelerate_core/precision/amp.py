"""torch.amp mixed precision: fp16 with dynamic loss scaling (GradScaler), and bf16 autocast.

Both run on CPU and CUDA (torch >= 2.3 has `torch.amp.GradScaler(device)`). A step is "skipped"
exactly when the scaler found non-finite gradients: GradScaler then does not call
optimizer.step() and multiplies its scale by backoff_factor (< 1), so a scale that went down
across `update()` is the skip signal, without reaching into the scaler's private state.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch

from accelerate_core.precision.base import Precision

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class AMPPrecision(Precision):
    """`mixed_precision` is "fp16" or "bf16"; `device` decides the autocast device type."""

    def __init__(self, mixed_precision: str, device: torch.device) -> None:
        if mixed_precision not in _DTYPES:
            raise ValueError(f"AMPPrecision takes 'fp16' or 'bf16', got {mixed_precision!r}")
        self.mixed_precision = mixed_precision
        self.device_type = device.type
        self.dtype = _DTYPES[mixed_precision]
        self.scaler: torch.amp.GradScaler | None = (
            torch.amp.GradScaler(self.device_type) if mixed_precision == "fp16" else None
        )
        # GradScaler refuses a second unscale_ of one optimizer before update(); clip_grad_norm_
        # may be called more than once per step, so remember which ones are unscaled already.
        self._unscaled: set[int] = set()

    @property
    def uses_autocast(self) -> bool:
        return True

    def autocast(self) -> AbstractContextManager[Any]:
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss) if self.scaler is not None else loss

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None or id(optimizer) in self._unscaled:
            return
        self.scaler.unscale_(optimizer)
        self._unscaled.add(id(optimizer))

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        if self.scaler is None:
            optimizer.step()
            return False
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        self._unscaled.discard(id(optimizer))
        return self.scaler.get_scale() < before

    @property
    def loss_scale(self) -> float | None:
        return self.scaler.get_scale() if self.scaler is not None else None

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
