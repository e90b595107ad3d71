"""`clip_norm`: gradient clipping through `accelerator.clip_grad_norm_` at a max norm the
gradients exceed on some steps and stay below on others, with SGD + momentum (which carries every
clipped step into the next ones). Both sides matter: a clip that leaves the steps above the max
norm alone is seen on the first, one that scales every gradient to the max norm, up as well as
down (a clip coefficient not clamped at 1), on the second. Measured in plain PyTorch: the pre-clip
norm exceeds 0.55 on 7 of the 12 steps (0.56-0.86) and stays below it on 5 (0.43-0.50).

Each backend clips its own way: single/DDP call torch.nn.utils.clip_grad_norm_ on the
(unscaled, all-reduced) gradients; DeepSpeed clips inside its optimizer step, over partitioned
gradients under ZeRO 2/3. A clip applied to scaled fp16 gradients, to one rank's half of the
gradients, before the all-reduce, or not at all, moves every weight; the golden clips with
torch.nn.utils.clip_grad_norm_ in plain PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks.base import Task
from harness.tasks.sgd_accum import SmallMLP, mlp_data


@dataclass(frozen=True, kw_only=True)
class ClipNormTask(Task):
    name: str = "clip_norm"
    seed: int = 23
    train_size: int = 48
    eval_size: int = 37
    global_batch_size: int = 8
    eval_batch_size: int = 8
    epochs: int = 2
    features: int = 6
    hidden: int = 16
    outputs: int = 4
    lr: float = 0.05
    momentum: float = 0.9
    target_scale: float = 1.0
    max_grad_norm: float | None = 0.55

    def _make_model(self) -> nn.Module:
        return SmallMLP(self.features, self.hidden, self.outputs)

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.lr, momentum=self.momentum)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        return mlp_data(size, self.features, self.outputs, generator, self.seed, self.target_scale)
