"""Tasks whose training DataLoader takes a custom sampler, and `weighted`, the built-in one.

Class imbalance is commonly met with `DataLoader(dataset, batch_size=..., sampler=
WeightedRandomSampler(weights, num_samples, replacement=True, generator=...))`: each epoch draws
`num_samples` indices, rare samples more often, some twice, others not at all. An Accelerator
cannot shard such a sampler as it shards a RandomSampler or a SequentialSampler: it has to take
the order the user's sampler gives in each pass, as many indices as the sampler says (not as the
dataset holds), and give rank r the r-th block of each global batch of it, the same order on every
rank. What order the batches come in is defined by torch's own sampler, drawn from its seeded
generator, not by the code under test; the plain-PyTorch reference iterates the same kind of loader
over whole global batches, epoch after epoch.

`weighted` itself: the MLP of `sgd_accum` with plain SGD, 48 samples of which each epoch draws 40
(5 global batches of 8) with weights 1, 2, 3, 1, 2, 3, ..., over 3 epochs. Plain SGD moves by
lr x gradient, so a batch taken from another draw, a draw repeated from the last epoch, or a pass
of 6 batches where the sampler gives 5 moves the weights from that step on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import WeightedRandomSampler

from harness.tasks.base import Task
from harness.tasks.sgd_accum import SmallMLP, mlp_data


@dataclass(frozen=True, kw_only=True)
class WeightedSamplingTask(Task):
    """Base of tasks whose training DataLoader draws `samples_per_epoch` indices per epoch, with
    replacement, from a `WeightedRandomSampler` with a generator seeded `sampler_seed`: weight
    1 + (i mod `weight_period`) for sample i."""

    sampler_seed: int = 0
    samples_per_epoch: int = 40
    weight_period: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.samples_per_epoch % self.global_batch_size or self.samples_per_epoch <= 0:
            raise ValueError(
                f"task {self.name!r}: samples_per_epoch {self.samples_per_epoch} is not a positive multiple "
                f"of global_batch_size {self.global_batch_size}. Fix: a multiple, so that every global "
                "batch of the sampler's draw is full"
            )

    @property
    def micro_steps_per_epoch(self) -> int:
        # The sampler's length, not the dataset's, is what one pass iterates.
        return self.samples_per_epoch // self.global_batch_size

    def training_sampler(self) -> WeightedRandomSampler:
        """A fresh sampler with a freshly seeded generator: every process and the reference start alike."""
        weights = [1.0 + i % self.weight_period for i in range(self.train_size)]
        return WeightedRandomSampler(weights, self.samples_per_epoch, replacement=True,
                                     generator=torch.Generator().manual_seed(self.sampler_seed))


@dataclass(frozen=True, kw_only=True)
class WeightedTask(WeightedSamplingTask):
    name: str = "weighted"
    seed: int = 29
    sampler_seed: int = 5
    train_size: int = 48
    samples_per_epoch: int = 40  # 5 global batches of 8 per epoch, drawn from the 48 samples
    eval_size: int = 37
    global_batch_size: int = 8
    eval_batch_size: int = 8
    epochs: int = 3
    features: int = 6
    hidden: int = 16
    outputs: int = 8
    lr: float = 0.05
    # As `shuffle`'s: 4 samples a rank keep fp16 gradients scaled by 2**16 below fp16's maximum.
    target_scale: float = 2.0

    def _make_model(self) -> nn.Module:
        return SmallMLP(self.features, self.hidden, self.outputs)

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.lr)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        return mlp_data(size, self.features, self.outputs, generator, self.seed, self.target_scale)
