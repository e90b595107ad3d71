"""`regression`: the smallest possible task, y = 2x + 3 + noise fitted by one weight and one bias
with plain SGD. When this fails, nothing else is worth reading."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks.base import Task, TaskOutput


class RegressionModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1))
        self.bias = nn.Parameter(torch.randn(1))

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        prediction = x * self.weight + self.bias
        loss = None if labels is None else nn.functional.mse_loss(prediction, labels)
        return TaskOutput(loss=loss, logits=prediction)


@dataclass(frozen=True, kw_only=True)
class RegressionTask(Task):
    name: str = "regression"
    seed: int = 42
    train_size: int = 64
    eval_size: int = 37
    global_batch_size: int = 8
    eval_batch_size: int = 8
    lr: float = 0.1
    noise: float = 0.1
    inject_overflow_step: int | None = 3

    def _make_model(self) -> nn.Module:
        return RegressionModel()

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.lr)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        x = torch.randn(size, generator=generator)
        labels = 2.0 * x + 3.0 + self.noise * torch.randn(size, generator=generator)
        return {"x": x, "labels": labels}
