"""`root_param`: a parameter owned by the root module (learnt positions, like a ViT's pos_embed)
used beside submodules, with the plain-dataclass output every task returns.

Its failure surface is how ZeRO-3 finds parameters to re-gather for backward: DeepSpeed hooks the
tensors of a module's output, and it cannot see into a plain dataclass (a Hugging Face
ModelOutput is a dict, which it can). Measured with DeepSpeed 0.19.8 directly, without the core:
such a model fails in its first backward with "The size of tensor a (0) must match the size of
tensor b (16)" (the root's parameter is still partitioned), while the same model returning a
tensor trains. The other tasks keep their parameters in submodules so that they are not hit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks.base import Task, TaskOutput


class RootParamModel(nn.Module):
    def __init__(self, length: int, features: int, dim: int, classes: int) -> None:
        super().__init__()
        self.proj = nn.Linear(features, dim)
        self.position = nn.Parameter(0.1 * torch.randn(length, dim))  # used directly in forward
        self.head = nn.Linear(dim, classes)

    def forward(self, patches: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        hidden = torch.tanh(self.proj(patches) + self.position)
        logits = self.head(hidden.mean(dim=1))
        loss = None if labels is None else nn.functional.cross_entropy(logits.float(), labels)
        return TaskOutput(loss=loss, logits=logits)


@dataclass(frozen=True, kw_only=True)
class RootParamTask(Task):
    name: str = "root_param"
    seed: int = 5
    train_size: int = 48
    eval_size: int = 37
    global_batch_size: int = 8
    eval_batch_size: int = 8
    epochs: int = 2
    inject_overflow_step: int | None = 2
    length: int = 4
    features: int = 6
    dim: int = 8
    classes: int = 3
    lr: float = 0.5

    def _make_model(self) -> nn.Module:
        return RootParamModel(self.length, self.features, self.dim, self.classes)

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.lr)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        # Labels from a fixed random linear rule over the summed patches (seeded by the task, not
        # the split, so that train and eval agree on what is learnt).
        rule = torch.randn(self.features, self.classes, generator=torch.Generator().manual_seed(self.seed))
        patches = torch.randn(size, self.length, self.features, generator=generator)
        labels = (patches.sum(dim=1) @ rule).argmax(dim=-1)
        return {"patches": patches, "labels": labels}
