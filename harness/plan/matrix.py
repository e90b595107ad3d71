"""Reading matrix/matrix.toml into cells, expected outcomes and environments.

The file is the one source pytest, nox, tox, CI and `python -m harness` read, so every mistake in
it is reported with the file, the section, the value given and the valid choices (MatrixError).
Cells are the product task x launch shape x strategy x precision, minus [[exclude]] entries;
[[include]] entries add cells that run only when named (`opt_in`, e.g. the canaries).

Tasks of a user's own package: the task axis may name one by import path (`"mypkg.tasks:MyTask"`)
and a top-level `tasks = ["mypkg.tasks"]` lists modules that define or register tasks (an absent
task axis then means every task they bring). They are imported here, and the paths travel with
the matrix (`Matrix.task_imports`) to every process that builds a task. The goldens of a matrix
file are in `golden/` beside it (`Matrix.golden_dir`; None for the repository's own).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from harness import implementations
from harness.errors import MatrixError, explain
from harness.paths import MATRIX_PATH, golden_dir_for
from harness.plan.cell import CORE, DEVICES, PRECISIONS, STRATEGIES, Cell, ResumeCell
from harness.plan.matrix_entries import (
    Environment,
    Expected,
    Match,
    bad,
    check_value,
    only_keys,
    parse_environment,
    parse_expected,
    parse_match,
    parse_reason,
    parse_shapes,
)
from harness.plan.resume_cells import parse_resume
from harness.plan.tolerances import Tolerance, ToleranceTable, parse_tolerances
from harness.tasks import TaskImportError, get_task, import_tasks, task_names
from harness.tasks.registry import is_import_path
from harness.versions.release_condition import holds_here

__all__ = ["Environment", "Expected", "Match", "Matrix", "MatrixError", "load_matrix"]

DEFAULT_PATH = MATRIX_PATH
SECTIONS = ("tasks", "axes", "shapes", "exclude", "include", "expected", "environments", "tolerances",
            "resume")


@dataclass
class Matrix:
    path: Path
    cells: list[Cell]
    opt_in_cells: list[tuple[Cell, str]]  # (cell, the -k word that opts it in)
    expected: list[Expected]
    environments: dict[str, Environment]
    excluded: list[tuple[Cell, str]]  # (cell, reason): kept so `list` can say why a cell is absent
    tolerances: ToleranceTable
    raw: dict[str, Any] = field(default_factory=dict)
    # Import paths of the user's tasks (modules of `tasks = [...]`, then `module:Name` entries of
    # the task axis): every process that builds a task imports them first.
    task_imports: tuple[str, ...] = ()
    # Resume cells ([resume], harness.plan.resume_cells): opt-in, see selection.resume_requested.
    resume_cells: list[ResumeCell] = field(default_factory=list)

    @property
    def golden_dir(self) -> Path | None:
        """`golden/` beside this matrix file; None for the repository's own (harness.paths)."""
        return golden_dir_for(self.path)

    def tolerance_for(self, precision: str, strategy: str, task: str | None = None) -> Tolerance:
        """The comparison tolerance of this matrix for a cell's precision and strategy, with the
        per-task weight tolerance of `task` (the golden's task) where it has one."""
        return self.tolerances.for_cell(precision, strategy, task)

    def expected_outcome(self, cell: Cell, env_name: str = "") -> Expected | None:
        for entry in self.expected:
            if (entry.match.matches(cell) and (not entry.environments or env_name in entry.environments)
                    and holds_here(entry.accelerate_versions)):
                return entry
        return None

    def all_cells(self) -> list[Cell]:
        return self.cells + [cell for cell, _ in self.opt_in_cells]

    def axis(self, name: str) -> list[Any]:
        return list(self.raw.get("axes", {}).get(name, []))


def load_matrix(path: str | Path | None = None, known_tasks: Iterable[str] | None = None,
                weights_per_task: bool = True) -> Matrix:
    """Parse and validate; `known_tasks` defaults to the task registry (harness.tasks).
    `weights_per_task=False` leaves out the per-task weight tolerances' file (the calibration
    that writes it loads the matrix without it)."""
    file = Path(path) if path is not None else DEFAULT_PATH
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise MatrixError(
            explain(
                f"matrix file {str(file)!r}",
                f"it cannot be read ({exc.strerror})",
                "an existing TOML file",
                "pass --matrix PATH to an existing file",
            )
        ) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(
            explain(
                f"matrix file {str(file)!r}",
                f"it is not valid TOML ({exc})",
                "TOML 1.0",
                "fix the syntax at the line and column named",
            )
        ) from None
    _known_sections(file, raw)
    _require_cells_can_exist(file, raw)
    imports = _import_user_tasks(file, raw)
    tasks = _known_tasks(known_tasks) | set(imports.names)
    matrix = _build(file, raw, tasks, weights_per_task)
    matrix.task_imports = imports.paths
    return matrix


def _require_cells_can_exist(file: Path, raw: dict[str, Any]) -> None:
    """A matrix without tasks or launch shapes has no cell: say which is missing, not that a
    selection matched nothing. (A missing axis other than task means every value of it.)"""
    given = f"matrix file {str(file)!r}"
    builtin = [name for name in sorted(task_names()) if not name.startswith("canary")]
    task_axis = (f"a task axis in [axes] (task = [...] of built-in tasks: {', '.join(builtin)}), or "
                 "tasks = ['mypkg.tasks'] at the top for your own")
    shape = "a [[shapes]] entry such as device = 'cpu', processes = 1, strategies = ['single']"
    if "axes" not in raw and "tasks" not in raw:
        raise MatrixError(explain(given, "it has no [axes] table (and no `tasks = [...]`), so it has no "
                                  "task and no cell", task_axis,
                                  "add an [axes] table with a task axis and [[shapes]] entries, or start "
                                  "from `python -m harness init DIR`"))
    axes = raw.get("axes")
    if isinstance(axes, dict) and "task" not in axes and "tasks" not in raw:
        raise MatrixError(explain(given, "its [axes] table has no task axis (and there is no `tasks = "
                                  "[...]`), so it has no tasks and no cell", task_axis,
                                  "add a task axis naming the tasks to run"))
    if not raw.get("shapes"):
        raise MatrixError(explain(given, "it has no [[shapes]] entries, so no launch shape and no cell",
                                  shape, "add [[shapes]] entries for the devices and process counts to run"))


@dataclass(frozen=True)
class _Imported:
    paths: tuple[str, ...]
    names: tuple[str, ...]


def _import_user_tasks(file: Path, raw: dict[str, Any]) -> _Imported:
    """Import `tasks = [...]` modules and `module:Name` task-axis entries, and rewrite the task
    axis to task names (a missing axis: every task the modules brought)."""
    modules = raw.get("tasks", [])
    if not isinstance(modules, list) or not all(isinstance(m, str) and m for m in modules):
        raise bad(file, "tasks", modules, "it must be a list of module import paths",
                  "e.g. tasks = [\"mypkg.tasks\"]", "write a list of strings")
    axes = raw.setdefault("axes", {})
    axis = axes.get("task")
    listed = axis if isinstance(axis, list) else []
    referenced = [v for v in listed if isinstance(v, str) and is_import_path(v)]
    paths = tuple(modules) + tuple(referenced)
    try:
        brought = {path: import_tasks([path]) for path in paths}
    except TaskImportError as exc:
        folder = file.resolve().parent
        where = f" (the matrix's own folder: PYTHONPATH={folder})" if "sys.path" in str(exc) else ""
        raise MatrixError(f"{file.name}: {exc}{where}") from None
    if isinstance(axis, list):
        axes["task"] = [name for value in axis
                        for name in (brought[value] if value in referenced else [value])]
    elif modules:
        axes["task"] = list(dict.fromkeys(name for m in modules for name in brought[m]))
    return _Imported(paths, tuple(dict.fromkeys(n for names in brought.values() for n in names)))


def _known_tasks(known: Iterable[str] | None) -> set[str]:
    # A task module that fails to import must fail loudly here, never switch validation off.
    return set(known) if known is not None else set(task_names())


def _known_sections(file: Path, raw: dict[str, Any]) -> None:
    for key in raw:
        if key not in SECTIONS:
            raise bad(file, "section", key, "it is not a known section", SECTIONS, "rename or remove it")


def _build(file: Path, raw: dict[str, Any], tasks: set[str], weights_per_task: bool = True) -> Matrix:
    axes = raw.get("axes", {})
    valid_axes = {
        "task": sorted(tasks),
        "device": DEVICES,
        "strategy": STRATEGIES,
        "precision": PRECISIONS,
        "implementation": implementations.names(),
    }
    for name, values in axes.items():
        if name not in valid_axes:
            raise bad(file, "[axes]", name, "it is not an axis", valid_axes, "use one of the axes")
        if not isinstance(values, list):
            raise bad(file, f"[axes].{name}", values, "it must be a list", "a list of strings", "write [..]")
        for value in values:
            check_value(file, f"[axes].{name}", name, value, valid_axes)
    shapes = parse_shapes(file, raw.get("shapes", []), valid_axes)
    cells = [
        Cell(task, device, processes, strategy, precision, implementation)
        for implementation in axes.get("implementation", [CORE])
        for task in axes.get("task", [])
        for device, processes, strategies in shapes
        if device in axes.get("device", DEVICES)
        for strategy in strategies
        if strategy in axes.get("strategy", STRATEGIES)
        for precision in axes.get("precision", PRECISIONS)
    ]
    excluded: list[tuple[Cell, str]] = []
    for i, entry in enumerate(raw.get("exclude", [])):
        match = parse_match(file, f"[[exclude]] #{i + 1}", entry, valid_axes, extra=("reason",))
        reason = parse_reason(file, f"[[exclude]] #{i + 1}", entry)
        excluded += [(c, reason) for c in cells if match.matches(c)]
        cells = [c for c in cells if not match.matches(c)]
    opt_in: list[tuple[Cell, str]] = []
    for i, entry in enumerate(raw.get("include", [])):
        where = f"[[include]] #{i + 1}"
        only_keys(file, where, entry, ("ids", "opt_in", "reason"))
        word = entry.get("opt_in", "")
        for cell_id in entry.get("ids", []):
            try:
                cell = Cell.from_id(cell_id)
            except ValueError as exc:
                raise MatrixError(f"{file.name} {where}: {exc}") from None
            check_value(file, where, "task", cell.task, valid_axes)
            if word:
                opt_in.append((cell, word))
            elif cell not in cells:
                cells.append(cell)
    expected = [parse_expected(file, i, entry, valid_axes) for i, entry in enumerate(raw.get("expected", []))]
    environments = {
        name: parse_environment(file, name, body) for name, body in raw.get("environments", {}).items()
    }
    tolerances = parse_tolerances(file, raw.get("tolerances", {}), weights_per_task)
    shape_names = [f"{device}{processes}-{strategy}"
                   for device, processes, names in shapes for strategy in names]
    resume_cells, resume_expected = parse_resume(file, raw.get("resume"), valid_axes, shape_names,
                                                 _optimizer_steps(raw.get("resume")))
    expected = resume_expected + expected  # a pair's own reason before a task-wide one
    for cell in cells + [c for c, _ in opt_in] + resume_cells:  # every cell must be judgeable, said at load
        tolerances.for_cell(cell.precision, cell.strategy)
    matrix = Matrix(file, cells, opt_in, expected, environments, excluded, tolerances, raw)
    matrix.resume_cells = resume_cells
    return matrix


def _optimizer_steps(resume: Any) -> dict[str, int]:
    """Optimizer steps over the whole run of each task [resume.steps] names (that registers)."""
    steps = resume.get("steps", {}) if isinstance(resume, dict) else {}
    out = {}
    for name in steps if isinstance(steps, dict) else ():
        try:
            out[name] = get_task(name).steps
        except KeyError:
            continue  # an unknown task: parse_resume names it with the valid ones
    return out
