"""The prepared optimizer and scheduler.

`optimizer.step()` goes through the strategy, which asks the precision (GradScaler under fp16)
or the DeepSpeed engine; whether the step was skipped for non-finite gradients comes back and is
exposed as `is_overflow` (the name the user loop (docs/the-user-loop.md) reads) and `step_was_skipped`;
the Accelerator's observers (observers.py) hear of every step before and after it, with that flag.
A prepared scheduler does not advance after a skipped step, so the learning-rate schedule counts
only the steps that changed the weights.
"""

from __future__ import annotations

from typing import Any

import torch

from accelerate_core.observers import Observers


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps the optimizer the strategy returned. Not constructed through Optimizer.__init__:
    param_groups, state and defaults are the wrapped optimizer's own objects."""

    def __init__(self, optimizer: Any, strategy: Any, original: torch.optim.Optimizer | None = None,
                 observers: Observers | None = None) -> None:
        self.optimizer = optimizer
        self.strategy = strategy
        # The Accelerator's observers (observers.py), told of every step and whether it was skipped.
        self.observers = observers
        #: the torch optimizer the user built (schedulers were created against it)
        self.original = original if original is not None else optimizer
        self._is_overflow = False

    # The wrapped optimizer's own containers, so a scheduler or user code editing
    # param_groups (learning rates) edits the real thing.
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = value

    @property
    def state(self) -> Any:
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def defaults(self) -> dict[str, Any]:
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.optimizer.defaults = value

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        if closure is not None:
            raise NotImplementedError("closures are not supported through the prepared optimizer")
        if self.observers is not None:
            self.observers.notify_before("before_optimizer_step", self)
        self._is_overflow = bool(self.strategy.optimizer_step(self.optimizer))
        if self.observers is not None:
            self.observers.notify_after("after_optimizer_step", self, self._is_overflow)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.strategy.zero_grad(self.optimizer, set_to_none=set_to_none)

    @property
    def is_overflow(self) -> bool:
        """True exactly when the last step was skipped because loss scaling found inf/NaN."""
        return self._is_overflow

    @property
    def step_was_skipped(self) -> bool:
        return self._is_overflow

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"


class AcceleratedScheduler:
    """Steps the wrapped scheduler unless its optimizer's last step was skipped."""

    def __init__(self, scheduler: Any, optimizers: list[AcceleratedOptimizer]) -> None:
        self.scheduler = scheduler
        self.optimizers = optimizers

    def step(self, *args: Any, **kwargs: Any) -> None:
        if any(opt.step_was_skipped for opt in self.optimizers):
            return
        self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        return self.scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        # Anything else (last_epoch, base_lrs, ...) is the wrapped scheduler's.
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)
