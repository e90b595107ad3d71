"""Golden baselines: `<task>-<precision>.{safetensors,json}` in `golden/` beside the matrix file
(the repository's: `matrix/golden/`), made by the plain PyTorch reference and checked in.

A user's matrix elsewhere keeps its goldens in its own `golden/` (`--matrix path/to/matrix.toml`
reads and `golden --update` writes `path/to/golden/`); a built-in task's golden that is not there
is read from the harness's own `matrix/golden/`, where it ships.

A golden is a Record whose JSON `meta.golden` also holds the task's definition hash, the sha256 of
its data and the seed. Loading one verifies the tensors' sha256 (Record.load) and that it was
made for the task as defined now: a stale or tampered golden is an error, never a comparison.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from harness.errors import GoldenError, RecordError, explain
from harness.golden.global_rng import GLOBAL_RNG_LOCK
from harness.golden.golden_check import GoldenCheck, judge_regeneration, short_repr
from harness.golden.golden_generation import generate
from harness.golden.precision_visible import refusal, unchanged_by_precision
from harness.golden.regeneration import REGENERATION_TABLE, regeneration_tolerance
from harness.paths import GOLDEN_DIR, golden_dir_for, is_default_matrix
from harness.plan.cell import PRECISIONS
from harness.record.record_format import Record
from harness.tasks import get_task, task_names
from harness.tasks.base import Task
from harness.tasks.registry import is_builtin


def update_command(task_name: str, precision: str | None = None, matrix_path: Path | None = None) -> str:
    """The exact command that rewrites this golden only (its task, its precision, its matrix)."""
    command = f"python -m harness golden --update --task {task_name}"
    if precision is not None:
        command += f" --precision {precision}"
    if not is_default_matrix(matrix_path):
        command += f" --matrix {matrix_path}"
    return command


def _fix_update(task_name: str, precision: str, matrix_path: Path | None = None) -> str:
    return f"regenerate it with `{update_command(task_name, precision, matrix_path)}` (and review the diff)"


def golden_stem(task_name: str, precision: str, golden_dir: Path | None = None) -> Path:
    """Where this golden is written (and, for a user's task, read)."""
    return (golden_dir or GOLDEN_DIR) / f"{task_name}-{precision}"


def golden_stem_to_read(task_name: str, precision: str, golden_dir: Path | None = None) -> Path:
    """Where this golden is read: beside the matrix; for a built-in task without a golden there,
    the harness's own (it ships with the harness)."""
    stem = golden_stem(task_name, precision, golden_dir)
    if golden_dir is None or stem.with_name(stem.name + ".json").exists():
        return stem
    try:
        builtin = is_builtin(get_task(task_name))
    except KeyError:
        return stem
    return golden_stem(task_name, precision, None) if builtin else stem


def load_golden(task_name: str, precision: str, golden_dir: Path | None = None, *,
                matrix_path: Path | None = None) -> Record:
    """The golden of `task_name` at `precision`, verified. `matrix_path` (the matrix in use)
    decides the folder (`golden/` beside it) and the fix a refusal names; `golden_dir` overrides
    the folder."""
    golden_dir = golden_dir if golden_dir is not None else golden_dir_for(matrix_path)
    stem = golden_stem_to_read(task_name, precision, golden_dir)
    try:
        task = get_task(task_name)
    except KeyError as exc:
        raise GoldenError(str(exc.args[0])) from None
    if precision not in PRECISIONS:
        raise GoldenError(explain(f"golden precision {precision!r}", "there are no goldens for it",
                                  PRECISIONS, "ask for one of these"))
    if not stem.with_name(stem.name + ".json").exists():
        raise GoldenError(explain(f"golden {stem}.json", f"there is no golden for task "
                                  f"{task_name!r} at {precision}", "an existing golden file",
                                  _fix_update(task_name, precision, matrix_path)))
    try:
        record = Record.load(stem, fix=_fix_update(task_name, precision, matrix_path))
    except RecordError as exc:
        raise GoldenError(f"golden {stem.name} is unusable (truncated or tampered with?): {exc}") from None
    meta = record.meta.get("golden", {})
    definition, data, initial_weights = _identity(task)
    checks = (
        ("task", record.task, task_name),
        ("precision", record.precision, precision),
        ("task definition hash", meta.get("task_definition_hash"), definition),
        ("data sha256", meta.get("data_sha256"), data),
        ("initial weights sha256", meta.get("init_sha256"), initial_weights),
    )
    for what, found, expected in checks:
        if found != expected:
            raise GoldenError(explain(
                f"golden {stem.name}: {what} {short_repr(found)}",
                f"the task {task_name!r} as defined now has {short_repr(expected)}: the golden was made "
                "for another task definition (the task's code, fields or data changed since)",
                "a golden made from the current task", _fix_update(task_name, precision, matrix_path)))
    return record


def _identity(task: Task) -> tuple[str, str, str]:
    """The task's definition hash, data sha256 and initial weights sha256, one thread at a time:
    the runner judges cells in parallel threads; building the model seeds torch's global RNG, and
    Python 3.11's ast.parse (in definition_hash) fails when two threads parse at once
    ("SystemError: AST constructor recursion depth mismatch", seen in CI). Kept per task as it is
    defined now (its class, its fields, the source of the modules its definition hash reads): a
    run loads a golden for every cell it judges, and hashing parses and dumps two modules'
    syntax trees (20 ms each time)."""
    fields = json.dumps(dataclasses.asdict(task), sort_keys=True, default=repr)
    key = (type(task), fields, *(inspect.getsource(sys.modules[name]) for name in _hashed_modules(task)))
    with GLOBAL_RNG_LOCK:
        if key not in _identities:
            _identities[key] = (task.definition_hash(), task.data_sha256(), task.init_sha256())
        return _identities[key]


_identities: dict[tuple[object, ...], tuple[str, str, str]] = {}


def _hashed_modules(task: Task) -> tuple[str, str]:
    """The modules Task.definition_hash reads the code of: the base module and the task's own."""
    return Task.__module__, type(task).__module__


def check_goldens(tasks: Iterable[str] | None = None, precisions: Iterable[str] | None = None,
                  golden_dir: Path | None = None, *, matrix_path: Path | None = None) -> list[GoldenCheck]:
    """Regenerate (deterministic mode, one child process) and judge each golden against it."""
    golden_dir = golden_dir if golden_dir is not None else golden_dir_for(matrix_path)
    pairs = _selection(tasks, precisions)
    fresh = generate(_with_fp32(pairs))
    return [_guarded(judge_regeneration(golden_stem_to_read(name, precision, golden_dir),
                                        fresh[(name, precision)],
                                        regeneration_tolerance(precision, _regeneration_table(golden_dir))),
                     name, precision, fresh)
            for name, precision in pairs]


def update_goldens(tasks: Iterable[str] | None = None, precisions: Iterable[str] | None = None,
                   golden_dir: Path | None = None, *, matrix_path: Path | None = None) -> list[GoldenCheck]:
    """Rewrite the goldens that are new or changed (not those reproduced bit for bit or within
    the regeneration tolerance: rewriting those would only trade one machine's last bits for
    another's); return every check, the rewritten ones marked `rewritten`. They are written
    beside the matrix (`matrix_path`), or into `golden_dir`. A half-precision golden that this
    precision left bit-identical to the fp32 one is refused, never written (`refused`)."""
    golden_dir = golden_dir if golden_dir is not None else golden_dir_for(matrix_path)
    pairs = _selection(tasks, precisions)
    fresh = generate(_with_fp32(pairs))
    checks = []
    for name, precision in pairs:
        stem = golden_stem(name, precision, golden_dir)
        tolerance = regeneration_tolerance(precision, _regeneration_table(golden_dir))
        check = _guarded(judge_regeneration(stem, fresh[(name, precision)], tolerance),
                         name, precision, fresh)
        if not check.passed and not check.refused:
            fresh[(name, precision)].save(stem)
            check = replace(check, rewritten=True)
        checks.append(check)
    return checks


def _with_fp32(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`pairs` and, for each task with a half precision among them, its fp32 golden too: the
    guard compares the two regenerations (harness.golden.precision_visible)."""
    half = dict.fromkeys(name for name, precision in pairs if precision != "fp32")
    wanted = [(name, "fp32") for name in half]
    return pairs + [pair for pair in wanted if pair not in pairs]


def _guarded(check: GoldenCheck, name: str, precision: str,
             fresh: dict[tuple[str, str], Record]) -> GoldenCheck:
    """`check`, refused when this half-precision regeneration is bit-identical to the fp32 one."""
    if precision == "fp32":
        return check
    task = get_task(name)
    compared = unchanged_by_precision(task, fresh[(name, precision)], fresh[(name, "fp32")])
    return check if compared is None else replace(check, refused=refusal(task, precision, compared))


def owned_golden_pairs() -> list[tuple[str, str]]:
    """Every (built-in task, precision) that has a golden of its own."""
    return _selection(None, None)


def owns_golden(task: Task) -> bool:
    """False for a task that borrows another's golden (`golden_of`, e.g. the fault canaries,
    which are `regression` plus a fault and are judged against regression's golden)."""
    return getattr(task, "golden_of", None) in (None, task.name)


def _selection(tasks: Iterable[str] | None, precisions: Iterable[str] | None) -> list[tuple[str, str]]:
    # Default: the harness's own tasks; a user's matrix names its tasks (harness.cli.golden).
    names = list(tasks) if tasks is not None else [
        n for n in task_names() if owns_golden(get_task(n)) and is_builtin(get_task(n))]
    chosen = list(precisions) if precisions is not None else list(PRECISIONS)
    for precision in chosen:
        if precision not in PRECISIONS:
            raise GoldenError(explain(f"precision {precision!r}", "goldens exist per precision",
                                      PRECISIONS, "pick from these"))
    for name in names:
        try:
            get_task(name)
        except KeyError as exc:  # names the valid tasks
            raise GoldenError(str(exc.args[0])) from None
    return [(name, precision) for name in names for precision in chosen]


def _regeneration_table(golden_dir: Path | None) -> Path:
    """A golden folder may carry its own table; the repository's otherwise."""
    own = (golden_dir or GOLDEN_DIR) / REGENERATION_TABLE.name
    return own if own.is_file() else REGENERATION_TABLE
