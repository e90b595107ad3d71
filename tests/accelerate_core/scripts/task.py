"""The small classification task the user loop trains in the core's tests.

Shared by mission_loop.py (through the core) and plain_reference.py (plain torch, nothing from
accelerate_core), so both start from identical weights and data.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

IN_FEATURES = 16
HIDDEN = 32
CLASSES = 4
MODEL_SEED = 0
TRAIN_DATA_SEED = 11
EVAL_DATA_SEED = 12
SHUFFLE_SEED = 1234  # the train DataLoader's generator seed


@dataclass
class TaskConfig:
    train_samples: int = 72  # 72 = 9 global batches of 8 on 2 ranks: the last accumulation is short
    eval_samples: int = 37  # uneven on purpose: the last eval batch is padded
    batch_size: int = 4  # per process
    world_size: int = 2  # the reference trains on global batches of world_size * batch_size
    gradient_accumulation_steps: int = 2
    epochs: int = 2
    lr: float = 1e-2
    mixed_precision: str = "no"
    inject_overflow_step: int | None = None  # optimizer step whose gradients are made inf


@dataclass
class ClassifierOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> ClassifierOutput:
        logits = self.net(x)
        loss = F.cross_entropy(logits.float(), labels) if labels is not None else None
        return ClassifierOutput(loss=loss, logits=logits)


def make_model() -> Classifier:
    torch.manual_seed(MODEL_SEED)
    return Classifier()


class SyntheticClassification(Dataset[dict[str, torch.Tensor]]):
    """Gaussian inputs labelled by a fixed random linear rule plus noise."""

    def __init__(self, num_samples: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(num_samples, IN_FEATURES, generator=g)
        weight = torch.randn(IN_FEATURES, CLASSES, generator=g)
        self.labels = (self.x @ weight + 0.5 * torch.randn(num_samples, CLASSES, generator=g)).argmax(1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[index], "labels": self.labels[index]}


def make_optimizer(model: nn.Module, config: TaskConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)


def make_scheduler(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.1, 1.0 - step / 12))
