"""The user loop's model, data and a plain-PyTorch reference run of it (no accelerate_core).

Imported by mission_noargs.py (the script `accelerate-core launch` starts) and by the test,
which computes the reference in its own process: a baseline made by the code under test would
prove nothing. With N ranks and a per-rank batch B the core trains like one process with batch
N x B (accelerate_core/data.py), so the reference uses batch N x B.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

SEED = 1234
TRAIN_SAMPLES = 32
EVAL_SAMPLES = 16
BATCH_PER_RANK = 4
EPOCHS = 2
GRADIENT_ACCUMULATION_STEPS = 2
LR = 0.1


class RegressionData(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, samples: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(samples, 4, generator=g)
        noise = 0.1 * torch.randn(samples, 1, generator=g)
        self.y = self.x @ torch.tensor([[1.5], [-2.0], [0.5], [3.0]]) + noise

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[index], "labels": self.y[index]}


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> Any:
        logits = self.net(x)
        return SimpleNamespace(loss=nn.functional.mse_loss(logits, labels), logits=logits)


def build(batch_size: int) -> tuple[nn.Module, torch.optim.Optimizer, Any, DataLoader[Any], DataLoader[Any]]:
    torch.manual_seed(SEED)
    model = Model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    train = DataLoader(RegressionData(TRAIN_SAMPLES, SEED + 1), batch_size=batch_size, shuffle=False)
    evaluation = DataLoader(RegressionData(EVAL_SAMPLES, SEED + 2), batch_size=batch_size, shuffle=False)
    return model, optimizer, scheduler, train, evaluation


def reference(world_size: int) -> dict[str, Any]:
    """The user loop in plain PyTorch on one process with the global batch."""
    model, optimizer, scheduler, train, evaluation = build(BATCH_PER_RANK * world_size)
    for _ in range(EPOCHS):
        for step, batch in enumerate(train):
            loss = model(**batch).loss / GRADIENT_ACCUMULATION_STEPS
            loss.backward()
            if (step + 1) % GRADIENT_ACCUMULATION_STEPS == 0 or step == len(train) - 1:
                optimizer.step()
                optimizer.zero_grad()
                scheduler.step()
    model.eval()
    with torch.no_grad():
        predictions = torch.cat([model(**batch).logits for batch in evaluation])
        labels = torch.cat([batch["labels"] for batch in evaluation])
    return {"state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "predictions": predictions, "labels": labels}
