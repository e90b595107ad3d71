"""The registry of tasks by name. Built-in tasks register on import of `harness.tasks`; other
modules (the canary tasks) call `register_task` the same way."""

from __future__ import annotations

from harness.tasks.base import Task

_TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    """Add `task` under `task.name`; registering the same definition twice is harmless."""
    from harness.spec.cell import TASK_NAME

    if not TASK_NAME.match(task.name):
        raise ValueError(
            f"task name {task.name!r}: cell ids split on '-', so a task name must match "
            f"{TASK_NAME.pattern}. Fix: use lowercase letters, digits and underscores"
        )
    existing = _TASKS.get(task.name)
    if existing is not None and existing != task:
        raise ValueError(f"task {task.name!r} is already registered with another definition")
    _TASKS[task.name] = task
    return task


def get_task(name: str) -> Task:
    try:
        return _TASKS[name]
    except KeyError:
        raise KeyError(
            f"task {name!r}: no such task. Valid: {', '.join(repr(n) for n in task_names())}. "
            "Fix: use one of these names (see `python -m harness list`)"
        ) from None


def task_names() -> list[str]:
    return sorted(_TASKS)
