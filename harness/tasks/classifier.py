"""`classifier`: an MLP over dict batches returning an output object with `.loss` (the user
loop), built to carry the features that distributed backends get wrong:

- a frozen parameter (`embed`: it must come back unchanged and must not need a gradient),
- a persistent buffer (`input_scale`: it must survive state-dict consolidation),
- a one-element parameter beside a weight in one module (`head.temperature`),
- three parameter groups with different lr and weight decay (AdamW),
- a warm-up then linear-decay LR scheduler, gradient accumulation over 2 micro-steps,
- an eval set of 37 samples, which divides by no world size above 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks.base import Task, TaskOutput, trainable


class ScaledHead(nn.Module):
    """A linear head with a learnt temperature. The temperature lives here, not on the root
    module: owned by the root, it would fail under ZeRO-3 (the `root_param` task shows why), and
    this task is meant to pass there."""

    def __init__(self, hidden: int, classes: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, classes)
        self.temperature = nn.Parameter(torch.ones(1))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden) * self.temperature


class Classifier(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.input_scale: torch.Tensor
        self.register_buffer("input_scale", torch.linspace(0.5, 1.5, features))
        self.embed = nn.Linear(features, hidden)
        self.embed.requires_grad_(False)
        self.body = nn.Linear(hidden, hidden)
        self.head = ScaledHead(hidden, classes)

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        # The cast matters under DeepSpeed fp16/bf16: 0.19 casts parameters to half but keeps
        # buffers fp32, and fp32 activations would then meet a half-precision Linear.
        hidden = self.embed(inputs * self.input_scale.to(inputs.dtype))
        hidden = hidden + nn.functional.gelu(self.body(hidden))
        logits = self.head(hidden)
        loss = None if labels is None else nn.functional.cross_entropy(logits.float(), labels)
        return TaskOutput(loss=loss, logits=logits)


@dataclass(frozen=True, kw_only=True)
class ClassifierTask(Task):
    name: str = "classifier"
    seed: int = 7
    train_size: int = 64
    eval_size: int = 37
    global_batch_size: int = 8
    eval_batch_size: int = 8
    gradient_accumulation_steps: int = 2
    epochs: int = 2
    inject_overflow_step: int | None = 2
    features: int = 10
    hidden: int = 16
    classes: int = 4
    warmup_steps: int = 2

    def _make_model(self) -> nn.Module:
        return Classifier(self.features, self.hidden, self.classes)

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        groups = [
            {"params": list(trainable(model, ("body.",))), "lr": 2e-2, "weight_decay": 0.01},
            {"params": list(trainable(model, ("head.linear.",))), "lr": 1e-2, "weight_decay": 0.0},
            {"params": list(trainable(model, ("head.temperature",))), "lr": 5e-3, "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups)

    def _make_scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        warmup, total = self.warmup_steps, self.steps

        def factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            return max(0.1, (total - step) / max(1, total - warmup))

        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        # Labels from a fixed random linear rule (seeded by the task, not the split), so that
        # train and eval agree on what is learnt.
        rule = torch.randn(self.features, self.classes, generator=torch.Generator().manual_seed(self.seed))
        inputs = torch.randn(size, self.features, generator=generator)
        labels = (inputs @ rule).argmax(dim=-1)
        return {"inputs": inputs, "labels": labels}
