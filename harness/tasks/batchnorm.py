"""`batchnorm` and `batchnorm_sync`: an MLP with a BatchNorm layer, the most common layer of
vision models and the one whose answer depends on how the batch is split.

In training, BatchNorm normalises with the statistics of the batch it sees and folds them into
its running statistics (buffers, saved in the state dict, used in eval). On N processes each rank
sees 1/N of the global batch:

- `batchnorm` (plain BatchNorm): each rank normalises with its own share's statistics, so the
  loss differs from the single-process golden's at the very first step, and so do the running
  statistics. matrix.toml declares that divergence expected on multi-process cells, with the
  diagnosis it must have (per-rank batch statistics);
- `batchnorm_sync`: the same model through `Accelerator(sync_batchnorm=True)`, which computes
  the statistics over the whole global batch: it must match the single-process golden on every
  backend. One process has nothing to synchronise, so both share one golden (`golden_of`).

The loss is a quarter of the cross-entropy (and the lr four times what it would be): DeepSpeed
fp16 keeps gradients in fp16 at a loss scale of 2**16, while the golden's amp keeps them in fp32,
and this model's per-rank gradients reach 1.5, which scaled by 2**16 overflows fp16 (max 65504):
the engine then skips a step the golden takes (measured: step 2 of the sync cells). A quarter
keeps them near 0.4 (26k scaled), with the same SGD trajectory.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks.base import Task, TaskOutput


class BatchNormNet(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, classes)
        )

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        logits = self.net(inputs)
        loss = None if labels is None else 0.25 * nn.functional.cross_entropy(logits.float(), labels)
        return TaskOutput(loss=loss, logits=logits)


@dataclass(frozen=True, kw_only=True)
class BatchNormTask(Task):
    name: str = "batchnorm"
    seed: int = 11
    train_size: int = 64
    eval_size: int = 37
    global_batch_size: int = 8  # 4 samples per rank on 2 processes: per-rank statistics differ
    eval_batch_size: int = 8
    epochs: int = 2
    features: int = 6
    hidden: int = 12
    classes: int = 3
    lr: float = 0.2  # 4 x 0.05: the loss is a quarter of the cross-entropy
    # Read by the user loop (harness.rank.loop): ask the Accelerator to synchronise statistics.
    sync_batchnorm: bool = False

    def _make_model(self) -> nn.Module:
        return BatchNormNet(self.features, self.hidden, self.classes)

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        # Inputs off-centre and of uneven scale, so that normalising actually moves them; labels
        # from a fixed rule (seeded by the task, not the split), so that train and eval agree.
        rule = torch.randn(self.features, self.classes, generator=torch.Generator().manual_seed(self.seed))
        inputs = 2.0 * torch.randn(size, self.features, generator=generator) + 1.0
        labels = (inputs @ rule).argmax(dim=-1)
        return {"inputs": inputs, "labels": labels}


@dataclass(frozen=True, kw_only=True)
class BatchNormSyncTask(BatchNormTask):
    name: str = "batchnorm_sync"
    sync_batchnorm: bool = True
    golden_of: str = "batchnorm"  # one process: synchronised or not, the same computation
