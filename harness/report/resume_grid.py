"""Resume cells as from x to grids: one per (task, precision), sources as rows, destinations as
columns (docs/resume.md). The matrix grid (harness.report.grid) leaves resume cells out: their
destination axes would land them on the square of the plain cell of that shape."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.judge.outcome import CellResult
from harness.plan.cell import ResumeCell


def is_resume(result: CellResult) -> bool:
    return isinstance(result.cell, ResumeCell)


def destination_of(cell: ResumeCell) -> str:
    return f"{cell.device}{cell.processes}-{cell.strategy}"


@dataclass
class ResumeGrid:
    task: str
    precision: str
    step: int  # optimizer steps before the checkpoint
    sources: list[str] = field(default_factory=list)  # rows, in the order met ("golden" first when present)
    destinations: list[str] = field(default_factory=list)  # columns
    cells: dict[tuple[str, str], CellResult] = field(default_factory=dict)

    def at(self, source: str, destination: str) -> CellResult | None:
        return self.cells.get((source, destination))

    @classmethod
    def all_of(cls, results: Sequence[CellResult]) -> list[ResumeGrid]:
        grids: dict[tuple[str, str], ResumeGrid] = {}
        for result in results:
            cell = result.cell
            if not isinstance(cell, ResumeCell):
                continue
            key = (cell.task, cell.precision)
            grid = grids.setdefault(key, cls(cell.task, cell.precision, cell.resume_step))
            destination = destination_of(cell)
            if cell.source not in grid.sources:
                grid.sources.append(cell.source)
            if destination not in grid.destinations:
                grid.destinations.append(destination)
            grid.cells[(cell.source, destination)] = result
        return list(grids.values())
