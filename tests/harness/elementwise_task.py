"""A task autocast cannot see: y = a*x + b with elementwise ops only (what `regression` and
`scalar` were before their prediction went through nn.functional.linear). Its half-precision
runs compute the fp32 bits, so its half-precision goldens must be refused and its half-precision
cells must fail with a clear sentence. Registered per test (`registered`), never globally."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from harness.tasks import Task, TaskOutput
from harness.tasks.registry import _TASKS


class ElementwiseModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(0.3 * torch.randn(1))
        self.b = nn.Parameter(0.3 * torch.randn(1))

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        prediction = self.a * x + self.b  # elementwise: autocast leaves it in fp32
        loss = None if labels is None else nn.functional.mse_loss(prediction.float(), labels.float())
        return TaskOutput(loss=loss, logits=prediction)


@dataclass(frozen=True, kw_only=True)
class ElementwiseTask(Task):
    name: str = "elementwise"
    seed: int = 3
    train_size: int = 32
    global_batch_size: int = 8
    inject_overflow_step: int | None = 1  # so the fp16 guard sees a skipped step too

    def _make_model(self) -> nn.Module:
        return ElementwiseModel()

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.3)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        x = 0.5 * torch.randn(size, generator=generator)
        return {"x": x, "labels": 0.5 * x + 0.2 + 0.05 * torch.randn(size, generator=generator)}


def registered(monkeypatch: pytest.MonkeyPatch) -> ElementwiseTask:
    """A fresh ElementwiseTask under a name of its own, in the registry for this test only."""
    task = ElementwiseTask(name=f"elementwise_{uuid.uuid4().hex[:8]}")
    monkeypatch.setitem(_TASKS, task.name, task)
    return task
