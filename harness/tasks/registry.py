"""The registry of tasks by name, and loading tasks from users' own packages by import path.

Built-in tasks register on import of `harness.tasks`; other modules (the canary tasks, a user's
task module) call `register_task` the same way. A matrix names a user's tasks by import path:
`"mypkg.tasks:MyTask"` (a Task subclass, built with its defaults, or a Task instance) or a module
(`tasks = ["mypkg.tasks"]`) whose Task subclasses, or whose `register_task` calls, define them.
Every process that builds a task (the worker on each rank, the child that makes goldens) imports
the same paths first (`import_tasks`), so a user's task exists wherever the harness needs it.
"""

from __future__ import annotations

import importlib
import inspect
import traceback
from types import ModuleType

from harness.errors import HarnessError
from harness.tasks.base import Task

_TASKS: dict[str, Task] = {}
_MODULE_TASKS: dict[str, list[str]] = {}  # module path -> the names it brought
_ORIGINS: dict[str, str] = {}  # task name -> the import path that brought it (users' tasks only)
BUILTIN_PACKAGE = "harness.tasks"


class TaskImportError(HarnessError, ValueError):
    """An import path in a matrix (or on a command line) does not lead to a task."""


def register_task(task: Task) -> Task:
    """Add `task` under `task.name`; registering the same definition twice is harmless."""
    from harness.plan.cell import TASK_NAME

    if not isinstance(task, Task):
        raise TypeError(f"register_task({task!r}): not a harness.tasks.Task instance. "
                        "Fix: pass an instance, e.g. register_task(MyTask())")
    if not TASK_NAME.match(task.name):
        raise ValueError(
            f"task name {task.name!r}: cell ids split on '-', so a task name must match "
            f"{TASK_NAME.pattern}. Fix: use lowercase letters, digits and underscores"
        )
    existing = _TASKS.get(task.name)
    if existing is not None and existing != task:
        raise ValueError(
            f"task {task.name!r} is already registered with another definition "
            f"({type(existing).__module__}.{type(existing).__qualname__}). Fix: give one of them "
            "another `name`"
        )
    _TASKS[task.name] = task
    return task


def get_task(name: str) -> Task:
    try:
        return _TASKS[name]
    except KeyError:
        raise KeyError(
            f"task {name!r}: no such task. Valid: {', '.join(repr(n) for n in task_names())}. "
            "Fix: use one of these names (see `python -m harness list`), or name a task of your own "
            "package by import path in matrix.toml (mypkg.tasks:MyTask in the task axis, or a module "
            "list: tasks = [mypkg.tasks])"
        ) from None


def task_names() -> list[str]:
    return sorted(_TASKS)


def is_builtin(task: Task) -> bool:
    """A task defined inside the harness (its goldens ship in the harness's matrix/golden/)."""
    module = type(task).__module__
    return module == BUILTIN_PACKAGE or module.startswith(BUILTIN_PACKAGE + ".")


def is_import_path(text: str) -> bool:
    """`pkg.module:Name` (a task) rather than a short name (`regression`)."""
    return ":" in text


def import_tasks(paths: list[str] | tuple[str, ...]) -> list[str]:
    """Import each path (`pkg.mod:Name` or a module `pkg.mod`) and register what it defines;
    return the names of the tasks each path brought, in order, without repeats."""
    names: list[str] = []
    for path in paths:
        found = load_task(path) if is_import_path(path) else load_module_tasks(path)
        for task in found:
            _ORIGINS.setdefault(task.name, path)
        names += [task.name for task in found if task.name not in names]
    return names


def import_paths_of(names: list[str] | tuple[str, ...]) -> list[str]:
    """The import paths another process must import to have these tasks (none for built-in
    tasks), without repeats: what the child that makes goldens is handed."""
    return list(dict.fromkeys(_ORIGINS[name] for name in names if name in _ORIGINS))


def load_task(path: str) -> list[Task]:
    """`pkg.mod:Name`: a Task subclass (built with its defaults) or a Task instance."""
    module_name, _, attribute = path.partition(":")
    module = _import(module_name, path)
    if not attribute or not hasattr(module, attribute):
        defined = sorted(n for n, v in vars(module).items() if _is_task_class(v) or isinstance(v, Task))
        raise TaskImportError(
            f"task {path!r}: module {module_name!r} has no {attribute!r}. Valid: the Task subclasses "
            f"or instances it defines: {defined or 'none'}. Fix: write `{module_name}:<one of them>`"
        )
    value = getattr(module, attribute)
    if _is_task_class(value):
        return [register_task(_instantiate(value, path))]
    if isinstance(value, Task):
        return [register_task(value)]
    raise TaskImportError(
        f"task {path!r}: {attribute} is a {type(value).__name__}, not a Task subclass or instance. "
        "Valid: a frozen dataclass deriving from harness.tasks.Task (docs/adding-a-task.md). "
        "Fix: point at the task class"
    )


def load_module_tasks(module_name: str) -> list[Task]:
    """A module of tasks: the tasks it registers itself (`register_task(...)` at import); when it
    registers none, every Task subclass it defines whose fields all have defaults, built and
    registered."""
    if module_name in _MODULE_TASKS:  # imported before: the same tasks, without a second import
        return [_TASKS[name] for name in _MODULE_TASKS[module_name]]
    before = set(_TASKS)
    module = _import(module_name, module_name)
    found = [task for name, task in _TASKS.items() if name not in before]
    if not found:  # imported (and registered) earlier by someone else
        found = [task for task in _TASKS.values() if type(task).__module__ == module.__name__]
    if not found:
        for value in vars(module).values():
            if _is_task_class(value) and value.__module__ == module.__name__ and _constructible(value):
                found.append(register_task(_instantiate(value, f"{module_name}:{value.__name__}")))
    if not found:
        raise TaskImportError(
            f"tasks module {module_name!r}: it defines and registers no task. Valid: a module with "
            "Task subclasses (frozen dataclasses whose fields all have defaults) or "
            "`register_task(...)` calls. Fix: add one, or name the task as `module:Class`"
        )
    _MODULE_TASKS[module_name] = [task.name for task in found]
    return found


def _import(module_name: str, given: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):  # the module itself is missing
            raise TaskImportError(
                f"task import path {given!r}: no module named {exc.name!r} on sys.path. Valid: a "
                "module importable from the current directory or PYTHONPATH. Fix: run from the folder "
                "that holds your package, or `export PYTHONPATH=/path/to/your/repo`"
            ) from None
        failure: Exception = exc  # a missing dependency inside the user's module
    except Exception as exc:  # the user's module (or one it imports) raised while it was imported
        failure = exc
    # The chain keeps the whole traceback for whoever prints one (a rank's error file); the CLI
    # prints the message: the exception's last line and where it was raised.
    raise TaskImportError(
        f"task import path {given!r}: importing module {module_name!r} raised "
        f"{_last_line(failure)} ({_raised_at(failure)}). Valid: a module that imports without error. "
        f"Fix: correct the error there; `python -c \"import {module_name}\"` shows the whole traceback"
    ) from failure


def _last_line(exc: BaseException) -> str:
    """`ZeroDivisionError: division by zero`: what a traceback ends with."""
    return traceback.format_exception_only(exc)[-1].strip()


def _raised_at(exc: BaseException) -> str:
    """`path/to/module.py, line 3`: the innermost frame (a syntax error: the line it names)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}, line {exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{frames[-1].filename}, line {frames[-1].lineno}" if frames else "where unknown"


def _is_task_class(value: object) -> bool:
    return inspect.isclass(value) and issubclass(value, Task) and value is not Task


def _constructible(cls: type[Task]) -> bool:
    import dataclasses

    return all(f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
               for f in dataclasses.fields(cls) if f.init)


def _instantiate(cls: type[Task], given: str) -> Task:
    try:
        return cls()  # type: ignore[call-arg]  # a subclass gives `name` its default
    except TypeError as exc:
        raise TaskImportError(
            f"task {given!r}: {cls.__name__}() cannot be built without arguments ({exc}). Valid: a "
            "Task subclass whose fields all have defaults (a `name` too). Fix: give every field a "
            "default, or create an instance in the module and name that"
        ) from None
