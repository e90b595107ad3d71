"""Columns of the grid folded away: those in which every cell was skipped for one cause.

On a machine without CUDA, 24 of the matrix's 39 configurations are CUDA ones, every cell of
them skipped: 24 grey columns that say one thing 240 times, and push the grid off the screen
(report.md is read as a CI job summary). They fold into one labelled column, "cuda1, cuda2:
240 cells skipped, no CUDA device"; report.md and report.html keep the full grid one click away.

A column folds when every cell in it (every environment's, in a merged grid) is skipped and all
their reasons are of one kind (`skip_kind`); columns of one kind fold together, and only where
that saves a column (a lone column keeps its own name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.judge.outcome import CellResult, Status
from harness.report.grid import Grid

MIN_FOLDED_COLUMNS = 2  # folding one column into one saves nothing and hides its name

# Reasons that differ only in a count, for one cause a reader acts on once. The wording is
# harness/plan/availability.py's (check(): reason code NO_CUDA); tests pin it against check().
_KINDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"needs \d+ CUDA devices?, found 0"), "no CUDA device"),
)


def skip_kind(reason: str) -> str:
    """The cause a skip reason names: 'needs 2 CUDA devices, found 0' -> 'no CUDA device'; any
    other reason is its own kind."""
    for pattern, kind in _KINDS:
        if pattern.fullmatch(reason):
            return kind
    return reason or "no reason given"


@dataclass(frozen=True)
class Fold:
    columns: tuple[str, ...]  # the grid's columns folded here, in grid order
    label: str  # their shortest names: "cuda1, cuda2", "cpu2-zero1, cpu2-zero3", a full column
    cells: int
    kind: str  # the cause, skip_kind of every cell's reason

    @property
    def text(self) -> str:
        """'cuda1, cuda2: 240 cells skipped, no CUDA device'."""
        return f"{self.label}: {self.cells} cells skipped, {self.kind}"


@dataclass(frozen=True)
class FoldedGrid:
    grid: Grid
    shown: list[str]  # the columns left standing, in grid order
    folds: list[Fold]  # in order of their first column


def _parts(column: str) -> tuple[str, str]:
    """(device+processes, device+processes-strategy) of 'cpu2-zero3-bf16'; the column itself
    for a key of another shape."""
    pieces = column.split("-")
    return (pieces[0], f"{pieces[0]}-{pieces[1]}") if len(pieces) == 3 else (column, column)


def label(columns: tuple[str, ...], all_columns: list[str]) -> str:
    """Name the folded columns by the shortest prefix all of whose grid columns are folded:
    'cuda1' for every cuda1 column, 'cpu2-zero1' for every precision of it, else the column."""
    chosen = set(columns)
    names: list[str] = []
    for column in columns:
        device, strategy = _parts(column)
        if all(c in chosen for c in all_columns if _parts(c)[0] == device):
            name = device
        elif all(c in chosen for c in all_columns if _parts(c)[1] == strategy):
            name = strategy
        else:
            name = column
        if name not in names:
            names.append(name)
    return ", ".join(names)


def _column_kind(cells: list[CellResult]) -> str | None:
    """The one skip kind of every cell of a column, or None when any ran or kinds differ."""
    kinds = {skip_kind(r.reason) for r in cells if Status(r.status) is Status.SKIPPED}
    if len(kinds) != 1 or any(Status(r.status) is not Status.SKIPPED for r in cells):
        return None
    return kinds.pop()


def fold(grid: Grid) -> FoldedGrid:
    by_kind: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for column in grid.columns:
        cells = [r for key in grid.rows if (r := grid.cells.get((key, column))) is not None]
        kind = _column_kind(cells)
        if kind is not None:
            by_kind.setdefault(kind, []).append(column)
            counts[kind] = counts.get(kind, 0) + len(cells)
    folds = [
        Fold(tuple(columns), label(tuple(columns), grid.columns), counts[kind], kind)
        for kind, columns in by_kind.items()
        if len(columns) >= MIN_FOLDED_COLUMNS
    ]
    folded = {column for f in folds for column in f.columns}
    return FoldedGrid(grid, [c for c in grid.columns if c not in folded], folds)
