"""`dropout`: an MLP with dropout in training, a task that draws random numbers inside every
training step.

One process draws its masks from one stream, exactly as the single-process golden does, so the
one-process cells must match. On N processes each rank draws its own masks from its own stream
(a rank sees 1/N of the batch): they are not the golden's masks, so a multi-process cell can only
agree with the golden by luck. The harness detects the draws (harness.rank.randomness) and fails
such a cell with that reason whatever its numbers; matrix.toml declares it expected. In eval,
dropout is off: the eval outputs compare the weights the run learnt.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks.base import Task, TaskOutput


class DropoutNet(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int, p: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Dropout(p), nn.Linear(hidden, classes)
        )

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        logits = self.net(inputs)
        loss = None if labels is None else nn.functional.cross_entropy(logits.float(), labels)
        return TaskOutput(loss=loss, logits=logits)


@dataclass(frozen=True, kw_only=True)
class DropoutTask(Task):
    name: str = "dropout"
    seed: int = 13
    train_size: int = 64
    eval_size: int = 37
    global_batch_size: int = 8
    eval_batch_size: int = 8
    features: int = 6
    hidden: int = 16
    classes: int = 3
    p: float = 0.3
    lr: float = 0.05

    def _make_model(self) -> nn.Module:
        return DropoutNet(self.features, self.hidden, self.classes, self.p)

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        rule = torch.randn(self.features, self.classes, generator=torch.Generator().manual_seed(self.seed))
        inputs = torch.randn(size, self.features, generator=generator)
        labels = (inputs @ rule).argmax(dim=-1)
        return {"inputs": inputs, "labels": labels}
