"""`regression`: the smallest possible task, y = 0.5x + 0.2 + noise fitted by one weight and one
bias with plain SGD. When this fails, nothing else is worth reading.

The numbers are small on purpose. DeepSpeed fp16 keeps weights *and gradients* in fp16, scaled by
a loss scale that starts at 2**16, while the autocast golden keeps fp32 gradients: with y = 2x + 3
the scaled fp16 gradients overflowed on every early step under ZeRO (a correct skip, but not the
golden's trajectory). Here the largest scaled gradient stays near 32k < 65504, per rank too.

The prediction is a 1x1 linear map (`nn.functional.linear`), not `x * weight + bias`: autocast
lowers linear to the half dtype and leaves elementwise ops in fp32, so with the elementwise form
the bf16 golden was bit-identical to the fp32 one and a bf16 cell that silently ran fp32 passed at
0% of its tolerance. Computed this way, the half-precision runs (golden and cells) compute the
prediction in fp16/bf16 and record the dtype they computed it in (the model's own output: this
model has no submodule, harness/judge/autocast_site.py). The loss stays fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks.base import Task, TaskOutput


class RegressionModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(0.3 * torch.randn(1))
        self.bias = nn.Parameter(0.3 * torch.randn(1))

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        # weight * x + bias as the one op autocast lowers (x: (N,) -> (N, 1) -> (N,)).
        prediction = nn.functional.linear(x.unsqueeze(-1), self.weight.view(1, 1), self.bias).squeeze(-1)
        # The loss in fp32 even for a half-precision model: its gradient seed is the loss scale,
        # and 2**16 does not fit in fp16 (max 65504).
        loss = None if labels is None else nn.functional.mse_loss(prediction.float(), labels.float())
        return TaskOutput(loss=loss, logits=prediction)


@dataclass(frozen=True, kw_only=True)
class RegressionTask(Task):
    name: str = "regression"
    seed: int = 42
    train_size: int = 64
    eval_size: int = 37
    global_batch_size: int = 8
    eval_batch_size: int = 8
    lr: float = 0.3
    noise: float = 0.05
    inject_overflow_step: int | None = 3

    def _make_model(self) -> nn.Module:
        return RegressionModel()

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.lr)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        x = 0.5 * torch.randn(size, generator=generator)
        labels = 0.5 * x + 0.2 + self.noise * torch.randn(size, generator=generator)
        return {"x": x, "labels": labels}
