"""`sgd_accum`: plain SGD (no momentum, no weight decay) with gradient accumulation over 3
micro-steps and a short last accumulation: 5 micro-batches per epoch make optimizer steps of
3 and 2 micro-batches, over 2 epochs.

Why plain SGD: AdamW divides each update by the gradient's own running scale, so a gradient off
by a constant factor (a loss divided by the accumulation steps twice, or not at all) trains
almost the same and hides the bug; plain SGD moves by lr x gradient, so any such factor shows
in every weight. Its gradient norm stays above 1.0 on every step (measured, docs/sensitivity.md),
so DeepSpeed clipping at its documented 1.0 where the loop asked for none would show here too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks.base import Task, TaskOutput


class SmallMLP(nn.Module):
    """Linear -> tanh -> Linear; the loss (mean squared error) computed in fp32.

    Several outputs per sample rather than one: the gradient's norm is spread over more
    elements, so it exceeds 1.0 while each element, multiplied by DeepSpeed fp16's initial loss
    scale of 2**16, stays below fp16's 65504 on every rank (measured: at most 28k for sgd_accum, 33k for
    clip_norm), and a fp16
    run skips no step the golden does not."""

    def __init__(self, features: int, hidden: int, outputs: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(features, hidden)
        self.out = nn.Linear(hidden, outputs)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        prediction = self.out(torch.tanh(self.hidden(x)))
        loss = None if labels is None else nn.functional.mse_loss(prediction.float(), labels.float())
        return TaskOutput(loss=loss, logits=prediction)


def mlp_data(size: int, features: int, outputs: int, generator: torch.Generator, rule_seed: int,
             target_scale: float) -> dict[str, torch.Tensor]:
    """x ~ N(0, 1); y = target_scale * sin(x @ w) for a fixed w (seeded by the task, so train
    and eval agree on what is learnt)."""
    w = torch.randn(features, outputs, generator=torch.Generator().manual_seed(rule_seed))
    x = torch.randn(size, features, generator=generator)
    # The labels in float64, rounded once to float32: a float32 matmul and sin give other last
    # bits on another CPU (AVX2 against AVX-512 kernels), and the data must be the same bits on
    # every machine (goldens check its sha256).
    labels = target_scale * torch.sin(x.double() @ w.double())
    return {"x": x, "labels": labels.float()}


@dataclass(frozen=True, kw_only=True)
class SGDAccumTask(Task):
    name: str = "sgd_accum"
    seed: int = 3
    train_size: int = 40  # 5 micro-batches of 8: accumulations of 3, then 2
    eval_size: int = 37
    global_batch_size: int = 8
    eval_batch_size: int = 8
    gradient_accumulation_steps: int = 3
    epochs: int = 2
    features: int = 6
    hidden: int = 16
    outputs: int = 8
    lr: float = 0.05
    target_scale: float = 5.0

    def _make_model(self) -> nn.Module:
        return SmallMLP(self.features, self.hidden, self.outputs)

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.lr)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        return mlp_data(size, self.features, self.outputs, generator, self.seed, self.target_scale)
