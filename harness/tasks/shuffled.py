"""Tasks whose training data is reshuffled every epoch, and `shuffle`, the built-in one.

A `ShuffledTask`'s training DataLoader is built as a user builds a reproducible one:
`DataLoader(dataset, batch_size=..., shuffle=True, generator=torch.Generator().manual_seed(s))`.
The rank loop hands that loader to the Accelerator; the plain-PyTorch reference iterates the same
kind of loader, over whole global batches, epoch after epoch. What order the batches come in is
therefore defined by torch's own DataLoader (each pass draws a worker base seed and then a
permutation from the generator), not by the code under test: an Accelerator that shards the data
must give rank r the r-th block of each global batch of exactly that order, in every epoch.

`shuffle` itself: the MLP of `sgd_accum` with plain SGD over 3 epochs of 6 batches. Plain SGD moves
by lr x gradient, so a batch taken in another order, twice, or not at all moves the weights, and
the loss of each step is computed on that step's batch: a wrong order shows in the losses from the
first step of the epoch where it starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from harness.tasks.base import Task
from harness.tasks.sgd_accum import SmallMLP, mlp_data


@dataclass(frozen=True, kw_only=True)
class ShuffledTask(Task):
    """Base of tasks whose training DataLoader shuffles with a generator seeded `shuffle_seed`."""

    shuffle_seed: int = 0


def training_loader_options(task: Task) -> dict[str, Any]:
    """The DataLoader arguments (besides the dataset and batch size) of `task`'s training data: a
    fresh, seeded generator per loader, so that every process and the reference start alike."""
    if isinstance(task, ShuffledTask):
        return {"shuffle": True, "generator": torch.Generator().manual_seed(task.shuffle_seed)}
    return {"shuffle": False}


@dataclass(frozen=True, kw_only=True)
class ShuffleTask(ShuffledTask):
    name: str = "shuffle"
    seed: int = 21
    shuffle_seed: int = 8
    train_size: int = 48  # 6 global batches of 8 per epoch
    eval_size: int = 37
    global_batch_size: int = 8
    eval_batch_size: int = 8
    epochs: int = 3
    features: int = 6
    hidden: int = 16
    outputs: int = 8
    lr: float = 0.05
    # Smaller targets than sgd_accum's 5.0: with 4 samples a rank, fp16 gradients scaled by the
    # initial loss scale of 2**16 overflowed at step 1 on one rank (not in the 8-sample golden).
    target_scale: float = 2.0

    def _make_model(self) -> nn.Module:
        return SmallMLP(self.features, self.hidden, self.outputs)

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.lr)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        return mlp_data(size, self.features, self.outputs, generator, self.seed, self.target_scale)
