"""The training DataLoader's arguments a task asks for, besides its dataset and batch size: the one
place the rank loop and the plain-PyTorch reference read them from, so both iterate the same batches.
"""

from __future__ import annotations

from typing import Any

from harness.tasks.base import Task
from harness.tasks.shuffled import training_loader_options as shuffling_options
from harness.tasks.uneven import UnevenTask
from harness.tasks.weighted import WeightedSamplingTask


def training_loader_options(task: Task) -> dict[str, Any]:
    """Shuffling (a fresh generator seeded as the task says: harness.tasks.shuffled), a custom
    sampler (harness.tasks.weighted) and, for a task whose last batch is short, the DataLoader's
    `drop_last`."""
    if isinstance(task, WeightedSamplingTask):
        return {"sampler": task.training_sampler()}
    options = shuffling_options(task)
    if isinstance(task, UnevenTask):
        options["drop_last"] = task.drop_last
    return options
