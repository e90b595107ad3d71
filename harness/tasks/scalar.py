"""`scalar`: y = a*x + b with `a` and `b` 0-dimensional parameters, the shape of the tiny
regression model many libraries test with (Hugging Face accelerate's RegressionModel).

It exists for one failure surface: 0-dim parameters. DeepSpeed flattens, partitions and
broadcasts parameters, and 0.19.8 breaks on them: `deepspeed.initialize` on 2 processes fails in
`_broadcast_model` at `p.data.view(torch.uint8)` ("self.dim() cannot be 0 to view Float as
Byte"). Kept apart from the other tasks so that this does not hide what they test under ZeRO.

`a * x + b` is computed as a 1x1 linear map of views of the 0-dim parameters
(`nn.functional.linear(x, a.view(1, 1), b.view(1))`): autocast lowers linear to the half dtype
and leaves elementwise ops in fp32, so the elementwise form made the bf16 golden bit-identical to
the fp32 one. The parameters themselves stay 0-dim (the failure surface above); only the op sees
them reshaped. The loss stays fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks.base import Task, TaskOutput


class ScalarModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(0.3 * torch.randn(()))
        self.b = nn.Parameter(0.3 * torch.randn(()))

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        # a * x + b as the one op autocast lowers; views, so the parameters stay 0-dim.
        prediction = nn.functional.linear(x.unsqueeze(-1), self.a.view(1, 1), self.b.view(1)).squeeze(-1)
        loss = None if labels is None else nn.functional.mse_loss(prediction.float(), labels.float())
        return TaskOutput(loss=loss, logits=prediction)


@dataclass(frozen=True, kw_only=True)
class ScalarTask(Task):
    name: str = "scalar"
    seed: int = 11
    train_size: int = 32
    eval_size: int = 37
    global_batch_size: int = 8
    eval_batch_size: int = 8
    lr: float = 0.5
    epochs: int = 2
    inject_overflow_step: int | None = 1

    def _make_model(self) -> nn.Module:
        return ScalarModel()

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.lr)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        # Small numbers for the same fp16 reason as `regression`.
        x = 0.5 * torch.randn(size, generator=generator)
        return {"x": x, "labels": -0.5 * x + 0.2 + 0.05 * torch.randn(size, generator=generator)}
