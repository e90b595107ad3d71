"""torch.amp mixed precision: fp16 with dynamic loss scaling (GradScaler), and bf16 autocast.

Both run on CPU and CUDA (torch >= 2.3 has `torch.amp.GradScaler(device)`). A step is "skipped"
exactly when the scaler found non-finite gradients: GradScaler then does not call
optimizer.step(), and lowers its scale at the next update(). The skip is read from the unscaled
gradients themselves (the same test GradScaler makes), not from the scaler's private state.
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
        self._registered: set[int] = set()  # optimizers the strategy set up
        self._stepped: set[int] = set()  # optimizers stepped since the last update()

    @property
    def uses_autocast(self) -> bool:
        return True

    def autocast(self) -> AbstractContextManager[Any]:
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def register_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        self._registered.add(id(optimizer))

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        if self.scaler is None:
            return loss
        self._update()  # a new backward starts a new iteration: settle the last one's scale
        return self.scaler.scale(loss)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None or id(optimizer) in self._unscaled:
            return
        self.scaler.unscale_(optimizer)
        self._unscaled.add(id(optimizer))

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        if self.scaler is None:
            optimizer.step()
            return False
        if id(optimizer) in self._stepped:  # stepped twice without a backward in between
            self._update()
        self.unscale_(optimizer)
        # GradScaler skips exactly when an unscaled gradient of this optimizer is inf/NaN.
        skipped = _has_non_finite_grad(optimizer)
        self.scaler.step(optimizer)
        self._stepped.add(id(optimizer))
        if self._stepped >= self._registered:
            self._update()
        return skipped

    def _update(self) -> None:
        """GradScaler.update() once per iteration, after every optimizer stepped: updating in
        between would unscale the later optimizers' gradients with the new scale."""
        if self.scaler is not None and self._stepped:
            self.scaler.update()
        self._stepped.clear()
        self._unscaled.clear()

    @property
    def loss_scale(self) -> float | None:
        return self.scaler.get_scale() if self.scaler is not None else None

    def state_dict(self) -> dict[str, Any]:
        self._update()
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])


def _has_non_finite_grad(optimizer: torch.optim.Optimizer) -> bool:
    grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if not grads:
        return False
    return not bool(torch.stack([torch.isfinite(g).all() for g in grads]).all())
