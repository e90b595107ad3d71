"""Reading matrix/matrix.toml into cells, expected outcomes and environments.

The file is the one source pytest, nox, tox, CI and `python -m harness` read, so every mistake in
it is reported with the file, the section, the value given and the valid choices (MatrixError).
Cells are the product task x launch shape x strategy x precision, minus [[exclude]] entries;
[[include]] entries add cells that run only when named (`opt_in`, e.g. the canaries).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from accelerate_core.errors import explain
from harness.cells import DEVICES, PRECISIONS, STRATEGIES, TASK_NAME, Cell

DEFAULT_PATH = Path(__file__).resolve().parent.parent / "matrix" / "matrix.toml"
SECTIONS = ("axes", "shapes", "exclude", "include", "expected", "environments", "tolerances")
MATCH_KEYS = ("task", "device", "processes", "strategy", "precision")
EXPECTED_STATUSES = ("xfailed",)


class MatrixError(ValueError):
    """matrix.toml is unreadable or holds a value outside its valid set."""


@dataclass(frozen=True)
class Match:
    """A pattern over cell axes: each key absent matches anything, else a list of allowed values."""

    values: dict[str, tuple[Any, ...]]

    def matches(self, cell: Cell) -> bool:
        return all(getattr(cell, key) in allowed for key, allowed in self.values.items())


@dataclass(frozen=True)
class Expected:
    match: Match
    status: str  # "xfailed"
    reason: str
    environments: tuple[str, ...] = ()  # empty: every environment


@dataclass(frozen=True)
class Environment:
    name: str
    description: str
    deepspeed: bool  # is deepspeed installed in this environment
    device: str  # "cpu" | "cuda": which cells this environment's CI job runs
    extras: tuple[str, ...] = ()
    runs_on: tuple[str, ...] = ("ubuntu-latest",)  # CI runner labels
    markexpr: str = ""  # the -m selection its CI job runs ("" = all cells of its device)


@dataclass
class Matrix:
    path: Path
    cells: list[Cell]
    opt_in_cells: list[tuple[Cell, str]]  # (cell, the -k word that opts it in)
    expected: list[Expected]
    environments: dict[str, Environment]
    excluded: list[tuple[Cell, str]]  # (cell, reason): kept so `list` can say why a cell is absent
    raw: dict[str, Any] = field(default_factory=dict)

    def expected_outcome(self, cell: Cell, env_name: str = "") -> Expected | None:
        for entry in self.expected:
            if entry.match.matches(cell) and (not entry.environments or env_name in entry.environments):
                return entry
        return None

    def all_cells(self) -> list[Cell]:
        return self.cells + [cell for cell, _ in self.opt_in_cells]

    def axis(self, name: str) -> list[Any]:
        return list(self.raw.get("axes", {}).get(name, []))


def load_matrix(path: str | Path | None = None, known_tasks: Iterable[str] | None = None) -> Matrix:
    """Parse and validate; `known_tasks` defaults to the task registry (harness.tasks)."""
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
    return _build(file, raw, _known_tasks(known_tasks))


def _known_tasks(known: Iterable[str] | None) -> set[str] | None:
    if known is not None:
        return set(known)
    try:
        from harness.tasks import task_names  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # registry not available yet: validate the name's shape only
        return None
    return set(task_names())


def _bad(
    file: Path, where: str, given: object, why: str, valid: Iterable[object] | str, fix: str
) -> MatrixError:
    valid_text = valid if isinstance(valid, str) else ", ".join(repr(v) for v in valid)
    return MatrixError(explain(f"{file.name} {where} = {given!r}", why, valid_text, fix))


def _build(file: Path, raw: dict[str, Any], tasks: set[str] | None) -> Matrix:
    for key in raw:
        if key not in SECTIONS:
            raise _bad(file, "section", key, "it is not a known section", SECTIONS, "rename or remove it")
    axes = raw.get("axes", {})
    valid_axes = {
        "task": sorted(tasks) if tasks is not None else None,
        "device": DEVICES,
        "strategy": STRATEGIES,
        "precision": PRECISIONS,
    }
    for name, values in axes.items():
        if name not in valid_axes:
            raise _bad(file, "[axes]", name, "it is not an axis", valid_axes, "use one of the axes")
        if not isinstance(values, list):
            raise _bad(file, f"[axes].{name}", values, "it must be a list", "a list of strings", "write [..]")
        for value in values:
            _check_value(file, f"[axes].{name}", name, value, valid_axes)
    shapes = _shapes(file, raw.get("shapes", []), valid_axes)
    cells = [
        Cell(task, device, processes, strategy, precision)
        for task in axes.get("task", [])
        for device, processes, strategies in shapes
        if device in axes.get("device", DEVICES)
        for strategy in strategies
        if strategy in axes.get("strategy", STRATEGIES)
        for precision in axes.get("precision", PRECISIONS)
    ]
    excluded: list[tuple[Cell, str]] = []
    for i, entry in enumerate(raw.get("exclude", [])):
        match = _match(file, f"[[exclude]] #{i + 1}", entry, valid_axes, extra=("reason",))
        reason = _reason(file, f"[[exclude]] #{i + 1}", entry)
        excluded += [(c, reason) for c in cells if match.matches(c)]
        cells = [c for c in cells if not match.matches(c)]
    opt_in: list[tuple[Cell, str]] = []
    for i, entry in enumerate(raw.get("include", [])):
        where = f"[[include]] #{i + 1}"
        _only_keys(file, where, entry, ("ids", "opt_in", "reason"))
        word = entry.get("opt_in", "")
        for cell_id in entry.get("ids", []):
            try:
                cell = Cell.from_id(cell_id)
            except ValueError as exc:
                raise MatrixError(f"{file.name} {where}: {exc}") from None
            _check_value(file, where, "task", cell.task, valid_axes)
            if word:
                opt_in.append((cell, word))
            elif cell not in cells:
                cells.append(cell)
    expected = [_expected(file, i, entry, valid_axes) for i, entry in enumerate(raw.get("expected", []))]
    environments = {
        name: _environment(file, name, body) for name, body in raw.get("environments", {}).items()
    }
    return Matrix(file, cells, opt_in, expected, environments, excluded, raw)


def _check_value(file: Path, where: str, axis: str, value: object, valid_axes: dict[str, Any]) -> None:
    valid = valid_axes[axis]
    if axis == "task":
        if not isinstance(value, str) or not TASK_NAME.match(value):
            raise _bad(
                file,
                where,
                value,
                "a task name uses lowercase letters, digits and '_' only",
                "names like 'regression' or 'tiny_lm'",
                "rename the task",
            )
        if valid is not None and value not in valid and not value.startswith("canary"):
            raise _bad(
                file,
                where,
                value,
                "no task of that name is registered",
                valid,
                "add the task under harness/tasks/ or fix the name",
            )
        return
    if value not in valid:
        raise _bad(file, where, value, f"it is not a valid {axis}", valid, f"use one of the {axis} values")


def _shapes(file: Path, entries: list[Any], valid_axes: dict[str, Any]) -> list[tuple[str, int, list[str]]]:
    out = []
    for i, entry in enumerate(entries):
        where = f"[[shapes]] #{i + 1}"
        _only_keys(file, where, entry, ("device", "processes", "strategies"))
        _check_value(file, where + ".device", "device", entry.get("device"), valid_axes)
        processes = entry.get("processes")
        if not isinstance(processes, int) or isinstance(processes, bool) or not 1 <= processes <= 64:
            raise _bad(
                file,
                where + ".processes",
                processes,
                "it must be a whole number of processes",
                "1..64",
                "write e.g. processes = 2",
            )
        for strategy in entry.get("strategies", []):
            _check_value(file, where + ".strategies", "strategy", strategy, valid_axes)
        out.append((entry["device"], processes, list(entry.get("strategies", []))))
    return out


def _only_keys(file: Path, where: str, entry: object, allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    if not isinstance(entry, dict):
        raise _bad(file, where, entry, "it must be a table", "a TOML table", "write key = value pairs")
    for key in entry:
        if key not in allowed:
            raise _bad(file, where, key, "it is not a known key", allowed, "rename or remove it")


def _match(
    file: Path, where: str, entry: dict[str, Any], valid_axes: dict[str, Any], extra: tuple[str, ...]
) -> Match:
    _only_keys(file, where, entry, MATCH_KEYS + extra)
    values: dict[str, tuple[Any, ...]] = {}
    for key in MATCH_KEYS:
        if key not in entry:
            continue
        given = entry[key] if isinstance(entry[key], list) else [entry[key]]
        for value in given:
            if key != "processes":
                _check_value(file, f"{where}.{key}", key, value, valid_axes)
        values[key] = tuple(given)
    return Match(values)


def _reason(file: Path, where: str, entry: dict[str, Any]) -> str:
    reason = entry.get("reason", "")
    if not isinstance(reason, str) or len(reason.strip()) < 10:
        raise _bad(
            file,
            where + ".reason",
            reason,
            "every exclusion and expected outcome needs a reason",
            "a sentence of at least 10 characters",
            "say why, e.g. the upstream issue",
        )
    return reason.strip()


def _expected(file: Path, i: int, entry: dict[str, Any], valid_axes: dict[str, Any]) -> Expected:
    where = f"[[expected]] #{i + 1}"
    match = _match(file, where, entry, valid_axes, extra=("status", "reason", "environments"))
    status = entry.get("status", "xfailed")
    if status not in EXPECTED_STATUSES:
        raise _bad(
            file, where + ".status", status, "not an expected outcome", EXPECTED_STATUSES, "use 'xfailed'"
        )
    return Expected(match, status, _reason(file, where, entry), tuple(entry.get("environments", [])))


def _environment(file: Path, name: str, body: dict[str, Any]) -> Environment:
    where = f"[environments.{name}]"
    _only_keys(file, where, body, ("description", "deepspeed", "device", "extras", "runs_on", "markexpr"))
    if not isinstance(body.get("deepspeed"), bool):
        raise _bad(
            file,
            where + ".deepspeed",
            body.get("deepspeed"),
            "it must say whether deepspeed is installed",
            (True, False),
            "write deepspeed = true or false",
        )
    device = body.get("device", "cpu")
    if device not in DEVICES:
        raise _bad(file, where + ".device", device, "not a device", DEVICES, "use one of the devices")
    return Environment(
        name=name,
        description=str(body.get("description", "")),
        deepspeed=body["deepspeed"],
        device=device,
        extras=tuple(body.get("extras", [])),
        runs_on=tuple(body.get("runs_on", ["ubuntu-latest"])),
        markexpr=str(body.get("markexpr", "")),
    )
