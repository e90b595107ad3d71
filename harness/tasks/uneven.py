"""Tasks whose training set is not a whole number of global batches, and `uneven`, the built-in one.

Most users' data does not divide by their batch size. A plain DataLoader then ends every epoch with
a short batch (or drops it, with `drop_last=True`), and the user loop steps the optimizer on it too:
`step == len(tr_data) - 1` counts it. An Accelerator must give one process exactly those batches.
With several processes it keeps the ranks even by filling the short global batch from the start of
the order (Hugging Face Accelerate's default `even_batches=True` does the same), so those cells train
the last step of every epoch on repeated samples: a different computation from the single-process
golden, declared in matrix.toml as such, and failing exactly at those steps.

`uneven` itself: the MLP of `sgd_accum` with plain SGD, 60 samples in global batches of 8 (7 full
batches and one of 4 per epoch), accumulating over 3 micro-batches: optimizer steps of 3, 3 and 2
micro-batches, the last of which holds the short batch, over 2 epochs. Plain SGD moves by lr x
gradient, so a short batch padded, dropped or left out of the last accumulation moves the weights.

`uneven_drop`: the same with `drop_last=True`, so each epoch is 7 batches of 8 (steps of 3, 3 and
1) on every backend: nothing is padded, and every cell must match the golden, the two-process ones
included. A sharded loader that loses the user's `drop_last` trains on the short batch (padded on
several processes) and takes an extra micro-step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks.base import Task
from harness.tasks.sgd_accum import SmallMLP, mlp_data


@dataclass(frozen=True, kw_only=True)
class UnevenTask(Task):
    """Base of tasks whose last global batch of an epoch is short: kept (a batch of
    train_size % global_batch_size samples) or, with `drop_last`, left out, as the training
    DataLoader's own `drop_last` says."""

    drop_last: bool = False

    def __post_init__(self) -> None:
        if not self.train_size % self.global_batch_size:
            raise ValueError(
                f"task {self.name!r}: train_size {self.train_size} is a multiple of global_batch_size "
                f"{self.global_batch_size}, so no batch is short and the task tests nothing of its own. "
                "Fix: a train_size that is not a multiple, or a plain Task"
            )

    @property
    def micro_steps_per_epoch(self) -> int:
        full, rest = divmod(self.train_size, self.global_batch_size)
        return full + (1 if rest and not self.drop_last else 0)


@dataclass(frozen=True, kw_only=True)
class UnevenBatchTask(UnevenTask):
    name: str = "uneven"
    seed: int = 17
    train_size: int = 60  # 7 global batches of 8 and one of 4 per epoch
    eval_size: int = 37
    global_batch_size: int = 8
    eval_batch_size: int = 8
    gradient_accumulation_steps: int = 3  # optimizer steps of 3, 3 and 2 micro-batches (the short one last)
    epochs: int = 2
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


@dataclass(frozen=True, kw_only=True)
class UnevenDropLastTask(UnevenBatchTask):
    name: str = "uneven_drop"
    drop_last: bool = True
