"""The matrix as a grid: one row per task, one column per configuration (the id minus the task).

A cell id is `{task}-{device}{processes}-{strategy}-{precision}`; the column key is everything
after the first '-', so 'mlp-cpu2-zero3-bf16' sits in row 'mlp', column 'cpu2-zero3-bf16'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.truth.outcome import CellResult


def column_of(result: CellResult) -> str:
    return f"{result.device}{result.processes}-{result.strategy}-{result.precision}"


@dataclass
class Grid:
    tasks: list[str]
    columns: list[str]
    cells: dict[tuple[str, str], CellResult]

    @classmethod
    def of(cls, results: Sequence[CellResult]) -> Grid:
        tasks: list[str] = []
        columns: list[str] = []
        cells: dict[tuple[str, str], CellResult] = {}
        for result in results:  # first appearance keeps the matrix file's order
            column = column_of(result)
            if result.task not in tasks:
                tasks.append(result.task)
            if column not in columns:
                columns.append(column)
            cells[(result.task, column)] = result
        return cls(tasks, columns, cells)

    def row(self, task: str) -> list[CellResult | None]:
        """The task's results in column order; None where the matrix has no such cell."""
        return [self.cells.get((task, column)) for column in self.columns]
