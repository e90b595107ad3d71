"""Reference tasks: `get_task(name)`, `task_names()`, `register_task(task)`, and
`import_tasks(paths)` for tasks of a user's own package named by import path
(`"mypkg.tasks:MyTask"` or a module `"mypkg.tasks"`; docs/adding-a-task.md).

Importing this package registers the built-in tasks, then imports every `canary*` module beside
them (tasks that must fail in a known way, written by the runner's side), which register
themselves the same way.
"""

from __future__ import annotations

import importlib
import pkgutil

from harness.tasks.base import DictDataset, Task, TaskOutput
from harness.tasks.batchnorm import BatchNormSyncTask, BatchNormTask
from harness.tasks.classifier import ClassifierTask
from harness.tasks.clip_norm import ClipNormTask
from harness.tasks.dropout import DropoutTask
from harness.tasks.lm import LMTask
from harness.tasks.loader_options import training_loader_options
from harness.tasks.registry import TaskImportError, get_task, import_tasks, register_task, task_names
from harness.tasks.regression import RegressionTask
from harness.tasks.root_param import RootParamTask
from harness.tasks.scalar import ScalarTask
from harness.tasks.sgd_accum import SGDAccumTask
from harness.tasks.shuffled import ShuffledTask, ShuffleTask
from harness.tasks.uneven import UnevenBatchTask, UnevenDropLastTask, UnevenTask
from harness.tasks.weighted import WeightedSamplingTask, WeightedTask

register_task(RegressionTask())
register_task(ClassifierTask())
register_task(LMTask())
register_task(ScalarTask())
register_task(RootParamTask())
register_task(SGDAccumTask())
register_task(ClipNormTask())
register_task(BatchNormTask())
register_task(BatchNormSyncTask())
register_task(DropoutTask())
register_task(ShuffleTask())
register_task(UnevenBatchTask())
register_task(UnevenDropLastTask())
register_task(WeightedTask())

for _module in pkgutil.iter_modules(__path__):
    if _module.name.startswith("canary"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "DictDataset", "ShuffledTask", "Task", "TaskImportError", "TaskOutput", "UnevenTask",
    "WeightedSamplingTask", "get_task", "import_tasks", "register_task", "task_names",
    "training_loader_options",
]
