"""Reference tasks: `get_task(name)`, `task_names()`, `register_task(task)`.

Importing this package registers the built-in tasks, then imports every `canary*` module beside
them (tasks that must fail in a known way, written by the runner's side), which register
themselves the same way.
"""

from __future__ import annotations

import importlib
import pkgutil

from harness.tasks.base import DictDataset, Task, TaskOutput
from harness.tasks.classifier import ClassifierTask
from harness.tasks.lm import LMTask
from harness.tasks.registry import get_task, register_task, task_names
from harness.tasks.regression import RegressionTask
from harness.tasks.root_param import RootParamTask
from harness.tasks.scalar import ScalarTask

register_task(RegressionTask())
register_task(ClassifierTask())
register_task(LMTask())
register_task(ScalarTask())
register_task(RootParamTask())

for _module in pkgutil.iter_modules(__path__):
    if _module.name.startswith("canary"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["DictDataset", "Task", "TaskOutput", "get_task", "register_task", "task_names"]
