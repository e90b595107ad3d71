"""The precision contract: how a forward runs (autocast) and how a loss becomes gradients.

A strategy holds one Precision and asks it for autocast and loss scaling. The base class is the
fp32 behaviour (no autocast, no scaling); `amp.py` adds fp16 loss scaling and bf16 autocast.
DeepSpeed's engine scales by itself, so its precision (precision/deepspeed.py) only overrides
what it needs. Keep this class small: everything here is something every backend may call.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn

# Attribute under which the un-patched forward of a wrapped module is kept, so that teardown can
# restore the user's module exactly as it was handed in.
_ORIGINAL_FORWARD = "_accelerate_core_original_forward"


class Precision:
    """fp32: every hook is a plain pass-through."""

    #: "no", "fp16" or "bf16" (the value users pass as Accelerator(mixed_precision=...))
    mixed_precision: str = "no"

    def autocast(self) -> AbstractContextManager[Any]:
        """The context a forward runs in."""
        return nullcontext()

    @property
    def uses_autocast(self) -> bool:
        return False

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss to call backward on (multiplied by the loss scale under fp16)."""
        return loss

    def backward(self, loss: torch.Tensor) -> None:
        self.scale(loss).backward()

    def register_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Called by the strategy for every optimizer it sets up (loss scaling needs to know
        when all of them have stepped)."""

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the gradients by the loss scale (before clipping). Idempotent per step."""

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Run the optimizer step; return True when it was skipped (non-finite gradients)."""
        optimizer.step()
        return False

    @property
    def loss_scale(self) -> float | None:
        """The current loss scale, None when the precision does not scale."""
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what state_dict returned."""

    def wrap_forward(self, module: nn.Module) -> None:
        """Make `module(...)` run under this precision's autocast, so the user's loop needs no
        `with accelerator.autocast():`. A no-op when the precision has no autocast."""
        if not self.uses_autocast or hasattr(module, _ORIGINAL_FORWARD):
            return
        original = module.forward
        autocast = self.autocast

        @functools.wraps(original)
        def forward(*args: Any, **kwargs: Any) -> Any:
            with autocast():
                return original(*args, **kwargs)

        setattr(module, _ORIGINAL_FORWARD, original)
        module.forward = forward

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.mixed_precision!r})"


def unwrap_forward(module: nn.Module) -> None:
    """Undo Precision.wrap_forward (the instance attribute hides the class's forward)."""
    if hasattr(module, _ORIGINAL_FORWARD):
        delattr(module, _ORIGINAL_FORWARD)
        if "forward" in module.__dict__:
            del module.__dict__["forward"]
