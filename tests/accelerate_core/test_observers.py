"""accelerate_core.observers: the one interface every record of a run is made through. A real
Accelerator on one CPU process tells its observers, in order, of each prepare, backward,
optimizer step (skipped or not), gather and state dict, with the objects that ran; process-wide
observers hear every Accelerator; `what_ran()` reads the backend from those objects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelerate_core.observers as observers
from accelerate_core import Accelerator
from accelerate_core.evidence import precision_in_use, what_ran
from accelerate_core.optimizer import AcceleratedOptimizer


class Log(observers.Observer):
    """Every hook call, as (hook, what it was given that a test can compare)."""

    def __init__(self, name: str = "log", calls: list[tuple[str, Any]] | None = None) -> None:
        self.name = name
        self.calls: list[tuple[str, Any]] = [] if calls is None else calls

    def on_prepare(self, accelerator: Any, prepared: Sequence[Any]) -> None:
        self.calls.append((f"{self.name}.on_prepare", [type(o).__name__ for o in prepared]))

    def before_backward(self, accelerator: Any, loss: torch.Tensor) -> None:
        self.calls.append((f"{self.name}.before_backward", float(loss.detach())))

    def after_backward(self, accelerator: Any, loss: torch.Tensor) -> None:
        self.calls.append((f"{self.name}.after_backward", float(loss.detach())))

    def before_optimizer_step(self, accelerator: Any, optimizer: Any) -> None:
        self.calls.append((f"{self.name}.before_optimizer_step", isinstance(optimizer, AcceleratedOptimizer)))

    def after_optimizer_step(self, accelerator: Any, optimizer: Any, skipped: bool) -> None:
        self.calls.append((f"{self.name}.after_optimizer_step", (skipped, optimizer.is_overflow)))

    def on_gather(self, accelerator: Any, result: Any) -> None:
        self.calls.append((f"{self.name}.on_gather", tuple(result.shape)))

    def on_state_dict(self, accelerator: Any, model: Any, state_dict: dict[str, torch.Tensor]) -> None:
        self.calls.append((f"{self.name}.on_state_dict", sorted(state_dict)))


def _objects() -> tuple[nn.Module, torch.optim.Optimizer, DataLoader]:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    inputs = torch.randn(6, 3, generator=torch.Generator().manual_seed(1))
    return model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(TensorDataset(inputs), batch_size=3)


def test_every_hook_hears_the_objects_that_ran_in_order() -> None:
    log = Log()
    accelerator = Accelerator(cpu=True, observers=[log])
    model, optimizer, loader = accelerator.prepare(*_objects())
    for (x,) in loader:
        accelerator.backward(model(x).square().mean())
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        accelerator.gather_for_metrics(model(torch.ones(4, 3)))
    accelerator.get_state_dict(model)
    hooks = [hook for hook, _ in log.calls]
    assert hooks == ["log.on_prepare"] + ["log.before_backward", "log.after_backward",
                                          "log.before_optimizer_step", "log.after_optimizer_step"] * 2 + [
        "log.on_gather", "log.on_state_dict"]
    assert log.calls[0][1] == ["Linear", "AcceleratedOptimizer", "PreparedDataLoader"]
    assert log.calls[3][1] is True and log.calls[4][1] == (False, False)
    assert log.calls[-2][1] == (4, 2) and log.calls[-1][1] == ["bias", "weight"]


@pytest.mark.fp16
def test_a_skipped_step_is_reported_as_skipped() -> None:
    log = Log()
    accelerator = Accelerator(fp16=True, cpu=True, observers=[log])
    model, optimizer, _ = accelerator.prepare(*_objects())
    accelerator.backward(model(torch.randn(2, 3)).float().mean() * float("inf"))
    optimizer.step()
    optimizer.zero_grad()
    accelerator.backward(model(torch.randn(2, 3)).float().mean())
    optimizer.step()
    steps = [value for hook, value in log.calls if hook == "log.after_optimizer_step"]
    assert steps == [(True, True), (False, False)]  # the flag is what is_overflow then says


def test_before_hooks_in_registration_order_after_hooks_reversed() -> None:
    calls: list[tuple[str, Any]] = []
    outer, inner = Log("outer", calls), Log("inner", calls)
    observers.register(outer)
    try:
        accelerator = Accelerator(cpu=True, observers=[inner])
        model, _optimizer, _loader = accelerator.prepare(*_objects())
        accelerator.backward(model(torch.ones(1, 3)).sum())
    finally:
        observers.unregister(outer)
    assert [hook for hook, _ in calls] == ["outer.on_prepare", "inner.on_prepare", "outer.before_backward",
                                           "inner.before_backward", "inner.after_backward",
                                           "outer.after_backward"]
    assert outer not in observers.registered()


def test_a_process_wide_observer_hears_an_accelerator_made_before_it() -> None:
    accelerator = Accelerator(cpu=True)
    log = Log()
    observers.register(log)
    observers.register(log)  # once, however often registered
    try:
        model = accelerator.prepare(nn.Linear(3, 1))
        accelerator.backward(model(torch.ones(1, 3)).sum())
    finally:
        observers.unregister(log)
    assert [hook for hook, _ in log.calls] == ["log.on_prepare", "log.before_backward", "log.after_backward"]


def test_only_observers_are_accepted() -> None:
    with pytest.raises(TypeError, match="Observer instances"):
        Accelerator(cpu=True, observers=[object()])  # type: ignore[list-item]


def test_what_ran_reads_the_objects() -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(3, 1))
    ran = what_ran(accelerator, model)
    assert {k: ran[k] for k in ("strategy", "strategy_class", "model_class", "world_size", "device",
                                "emulated")} == {
        "strategy": "single", "strategy_class": "SingleDeviceStrategy", "model_class": "Linear",
        "world_size": 1, "device": "cpu", "emulated": False}
    assert "deepspeed" not in ran and "fsdp" not in ran
    assert what_ran(accelerator, None)["strategy"] == "none"  # nothing prepared: nothing to say it ran
    assert precision_in_use(accelerator) == {"mixed_precision": "no", "loss_scaling": False}
