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

from harness.errors import MatrixError, explain
from harness.paths import MATRIX_PATH
from harness.spec.cell import DEVICES, PRECISIONS, STRATEGIES, Cell
from harness.spec.matrix_entries import (
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
from harness.spec.tolerances import Tolerance, ToleranceTable, parse_tolerances
from harness.tasks import task_names

__all__ = ["Environment", "Expected", "Match", "Matrix", "MatrixError", "load_matrix"]

DEFAULT_PATH = MATRIX_PATH
SECTIONS = ("axes", "shapes", "exclude", "include", "expected", "environments", "tolerances")


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

    def tolerance_for(self, precision: str, strategy: str) -> Tolerance:
        """The comparison tolerance of this matrix for a cell's precision and strategy."""
        return self.tolerances.for_cell(precision, strategy)

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
    # A task module that fails to import must fail loudly here, never switch validation off.
    return set(known) if known is not None else set(task_names())


def _build(file: Path, raw: dict[str, Any], tasks: set[str] | None) -> Matrix:
    for key in raw:
        if key not in SECTIONS:
            raise bad(file, "section", key, "it is not a known section", SECTIONS, "rename or remove it")
    axes = raw.get("axes", {})
    valid_axes = {
        "task": sorted(tasks) if tasks is not None else None,
        "device": DEVICES,
        "strategy": STRATEGIES,
        "precision": PRECISIONS,
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
    tolerances = parse_tolerances(file, raw.get("tolerances", {}))
    for cell in cells + [c for c, _ in opt_in]:  # every cell must be judgeable, said at load
        tolerances.for_cell(cell.precision, cell.strategy)
    return Matrix(file, cells, opt_in, expected, environments, excluded, tolerances, raw)
