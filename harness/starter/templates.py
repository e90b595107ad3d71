"""The files `python -m harness init DIR` writes: a matrix and a task package that run as written.

`{package}` is replaced by the package name, `{tolerances}` by the harness's own measured
tolerance table (a starting point: the comments say to measure one's own).
"""

from __future__ import annotations

MATRIX = '''\
# The compatibility matrix of your own tasks, read by `python -m harness ... --matrix matrix.toml`.
# Cell id: {{task}}-{{device}}{{processes}}-{{strategy}}-{{precision}}, e.g. my_mlp-cpu2-zero3-bf16.
# Goldens (the plain-PyTorch baselines the cells are compared with) live in golden/ beside this
# file: `python -m harness golden --update --matrix matrix.toml` makes them.
#
# Your tasks, by import path: modules whose Task subclasses (or register_task calls) define them.
# Import them from the folder that holds the package, or put it on PYTHONPATH.
tasks = ["{package}.tasks"]

[axes]
# No `task` axis: every task of the modules above. Or name them, by name or by import path:
# task = ["my_mlp"]                       or   task = ["{package}.tasks:MyMLPTask"]
device = ["cpu", "cuda"]
strategy = ["single", "ddp", "zero1", "zero2", "zero3", "fsdp"]
precision = ["fp32", "fp16", "bf16"]

# Launch shapes: which strategies run on how many processes of each device. Cells of one
# (device, processes) share one launch.
[[shapes]]
device = "cpu"
processes = 1
strategies = ["single"]

[[shapes]]
device = "cpu"
processes = 2
strategies = ["ddp", "zero1", "zero2", "zero3", "fsdp"]

[[shapes]]
device = "cuda"
processes = 1
strategies = ["single", "zero1", "zero2", "zero3"]

[[shapes]]
device = "cuda"
processes = 2
strategies = ["ddp", "zero1", "zero2", "zero3", "fsdp"]

# [[exclude]]: cells removed, each with a reason. [[expected]]: expected failures with a reason
# (docs/adding-a-task.md lists the keys).

# Comparison tolerances by precision and strategy family (plain = single/ddp/fsdp, zero = zero1-3):
# an element passes when |run - golden| <= atol + rtol * |golden|. Copied from the harness's own
# matrix, where each was measured on its built-in tasks; measure your own model's before you
# trust them (a real bug moves numbers by far more than these). The own-semantics check of
# half-precision cells needs its own per-task measurement: `python -m harness calibrate --matrix
# matrix.toml --write-semantics-tolerances` writes it and says the line to add under [tolerances].
{tolerances}'''

PACKAGE_INIT = '''\
"""Tasks of this package for the compatibility harness (`python -m harness --matrix matrix.toml`)."""
'''

MODELS = '''\
"""The model under test: your own code, imported by the task (tasks.py). It returns an object
with `.loss` and `.logits`, as the harness's user loop expects (`output = model(**batch)`)."""

from __future__ import annotations

import torch
from torch import nn

from harness.tasks import TaskOutput


class TinyMLP(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(features, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        hidden = nn.functional.gelu(self.norm(self.hidden(inputs)))
        logits = self.head(hidden)
        # The loss in fp32 whatever the precision, as the harness's own tasks do.
        loss = None if labels is None else nn.functional.cross_entropy(logits.float(), labels)
        return TaskOutput(loss=loss, logits=logits)
'''

TASKS = '''\
"""`my_mlp`: TinyMLP trained with AdamW, a step schedule and gradient accumulation, two epochs.

A task is a frozen definition from which the harness rebuilds model, optimizer, scheduler and
data identically in every process (docs/adding-a-task.md has every field and hook).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks import Task
from {package}.models import TinyMLP


@dataclass(frozen=True, kw_only=True)
class MyMLPTask(Task):
    name: str = "my_mlp"             # lowercase letters, digits, underscores: cell ids split on '-'
    seed: int = 11
    train_size: int = 64             # whole global batches
    eval_size: int = 21              # divides by no world size above 1: uneven last batch on purpose
    global_batch_size: int = 8       # per micro-step over all processes: divisible by 1 and 2
    eval_batch_size: int = 8
    gradient_accumulation_steps: int = 2
    epochs: int = 2
    inject_overflow_step: int | None = 1  # fp16: this optimizer step overflows and must be skipped
    features: int = 6
    hidden: int = 16
    classes: int = 3

    def _make_model(self) -> nn.Module:
        return TinyMLP(self.features, self.hidden, self.classes)

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)

    def _make_scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        # Every random number from the generator given: the same data in every process.
        inputs = torch.randn(size, self.features, generator=generator)
        labels = inputs[:, : self.classes].argmax(dim=-1)
        return {{"inputs": inputs, "labels": labels}}
'''
