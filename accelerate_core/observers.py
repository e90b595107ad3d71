"""The one way to watch a run: observers the Accelerator tells what it did, as it does it.

Every record of a run is made through this interface: script mode's recorder
(accelerate_core/recording.py) and any tool's own (a test harness counting collectives, say)
implement `Observer` and are registered either on one Accelerator,
`Accelerator(observers=[...])`, or for the whole process, `register(observer)` (what script mode
does from its environment variable, since it cannot change the script). The hooks are called
with the objects that ran, so an observer reads what happened from them, never from what was
asked for.

Order: "before" hooks run in registration order (process-wide observers first, then the
Accelerator's own), "after" hooks in the reverse order, as nested context managers would: an
observer that brackets a window (opens it before a step, closes it after) sees the work of the
observers registered before it outside its window.

This module imports nothing of the core: the Accelerator is handed to hooks and typed `Any`, so
that no import cycle (not even a type-only one) joins the facade and what watches it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import torch

Hook = Literal["on_prepare", "before_backward", "after_backward", "before_optimizer_step",
               "after_optimizer_step", "on_gather", "on_state_dict"]

_process_wide: list[Observer] = []


class Observer:
    """A no-op for every hook: subclass it and override the hooks you need. `accelerator` is the
    Accelerator that ran the call (typed Any: see the module's docstring)."""

    def on_prepare(self, accelerator: Any, prepared: Sequence[Any]) -> None:
        """After `prepare(...)`: the prepared objects (models wrapped or sharded, optimizers and
        schedulers wrapped, dataloaders sharded), in the order they were given."""

    def before_backward(self, accelerator: Any, loss: torch.Tensor) -> None:
        """`accelerator.backward(loss)` was called; the backend's backward has not run yet."""

    def after_backward(self, accelerator: Any, loss: torch.Tensor) -> None:
        """The backend's backward ran (gradients reduced where this backward synchronises)."""

    def before_optimizer_step(self, accelerator: Any, optimizer: Any) -> None:
        """A prepared optimizer's `step()` was called; the backend has not stepped yet."""

    def after_optimizer_step(self, accelerator: Any, optimizer: Any, skipped: bool) -> None:
        """The backend stepped; `skipped`: loss scaling found inf/NaN gradients and left the
        weights as they were (what the optimizer's `is_overflow` now says)."""

    def on_gather(self, accelerator: Any, result: Any) -> None:
        """What `gather` / `gather_for_metrics` returned to the caller."""

    def on_state_dict(self, accelerator: Any, model: Any, state_dict: dict[str, torch.Tensor]) -> None:
        """What `get_state_dict(model)` returned (the consolidated state dict, on every rank)."""


def register(observer: Observer) -> None:
    """Watch every Accelerator of this process, those already made included (once each)."""
    if not any(o is observer for o in _process_wide):
        _process_wide.append(observer)


def unregister(observer: Observer) -> None:
    _process_wide[:] = [o for o in _process_wide if o is not observer]


def registered() -> tuple[Observer, ...]:
    """The process-wide observers, in registration order."""
    return tuple(_process_wide)


class Observers:
    """The observers of one Accelerator, bound to it: the core calls `notify_before(...)` and
    `notify_after(...)` here, and a prepared optimizer holds this object (not the Accelerator)
    to report its steps."""

    def __init__(self, accelerator: Any, own: Iterable[Observer] = ()) -> None:
        self._accelerator = accelerator
        self._own = list(own)
        for observer in self._own:
            if not isinstance(observer, Observer):
                raise TypeError(f"observers=[...] takes accelerate_core.observers.Observer instances, "
                                f"got a {type(observer).__qualname__}")

    def _all(self) -> list[Observer]:
        # Read at every call: a process-wide observer registered after the Accelerator was made
        # still hears from it (and the list is empty, hence cheap, when nobody watches).
        return [*_process_wide, *(o for o in self._own if not any(o is p for p in _process_wide))]

    def notify_before(self, hook: Hook, *args: Any) -> None:
        for observer in self._all():
            getattr(observer, hook)(self._accelerator, *args)

    def notify_after(self, hook: Hook, *args: Any) -> None:
        for observer in reversed(self._all()):
            getattr(observer, hook)(self._accelerator, *args)
