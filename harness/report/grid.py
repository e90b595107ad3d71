"""The matrix as a grid: one row per task, one column per configuration (the id minus the task).

A cell id is `{task}-{device}{processes}-{strategy}-{precision}`; the column key is everything
after the first '-', so 'mlp-cpu2-zero3-bf16' sits in row 'mlp', column 'cpu2-zero3-bf16'.

A merged report (`python -m harness report merge`) has one row per (environment, task):
`Grid.of(results, by_environment=True)`, rows then keyed `(environment, task)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.judge.outcome import CellResult
from harness.plan.cell import ResumeCell

RowKey = tuple[str, ...]  # (task,) or (environment, task)


def column_of(result: CellResult) -> str:
    return f"{result.device}{result.processes}-{result.strategy}-{result.precision}"


@dataclass
class Grid:
    rows: list[RowKey]
    columns: list[str]
    cells: dict[tuple[RowKey, str], CellResult]
    row_headers: tuple[str, ...] = ("task",)

    @classmethod
    def of(cls, results: Sequence[CellResult], by_environment: bool = False) -> Grid:
        rows: list[RowKey] = []
        columns: list[str] = []
        cells: dict[tuple[RowKey, str], CellResult] = {}
        for result in results:  # first appearance keeps the matrix file's (and inputs') order
            if isinstance(result.cell, ResumeCell):  # their own from x to grid: harness.report.resume_grid
                continue
            key: RowKey = (result.environment, result.task) if by_environment else (result.task,)
            column = column_of(result)
            if key not in rows:
                rows.append(key)
            if column not in columns:
                columns.append(column)
            cells[(key, column)] = result
        headers = ("environment", "task") if by_environment else ("task",)
        return cls(rows, columns, cells, headers)

    @property
    def tasks(self) -> list[str]:
        """The row labels' tasks, in order (one per row of a single-environment grid)."""
        return [key[-1] for key in self.rows]

    def row(self, key: RowKey | str) -> list[CellResult | None]:
        """The row's results in column order; None where the matrix has no such cell. A plain
        task name is the row `(task,)` of a single-environment grid."""
        row_key: RowKey = (key,) if isinstance(key, str) else key
        return [self.cells.get((row_key, column)) for column in self.columns]
