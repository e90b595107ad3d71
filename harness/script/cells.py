"""Script cells: the matrix's backends (launch shapes x strategies x precisions) with the script
as the task, each cell's reference cell, and the script's arguments for a cell.

A script cell id is the matrix's grammar with the script's name as the task: `train-cpu2-zero3-bf16`;
a cell of another implementation than the core (a Hugging Face Accelerate script) ends in its name:
`train-cpu2-zero3-bf16-accelerate`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection
from pathlib import Path

from harness.errors import UsageError, explain
from harness.plan.cell import CORE, DEVICES, PRECISIONS, STRATEGIES, TASK_NAME, Cell
from harness.plan.matrix import Matrix

DEFAULT_REFERENCE = "cpu1-single"  # at the cell's own precision; "cpu1-single-fp32" pins one
# Every backend a cell can have (fsdp included): built from the cell's own axes, never a copy.
_SHAPE = re.compile(rf"^({'|'.join(DEVICES)})[0-9]+-({'|'.join(STRATEGIES)})(-({'|'.join(PRECISIONS)}))?$")
# {processes}, {cell_dir}, {cell_id}, {N/processes}: replaced in the script's arguments per cell.
_PLACEHOLDER = re.compile(r"\{(processes|cell_dir|cell_id|([0-9]+)/processes)\}")


def script_name(script: Path, given: str | None) -> str:
    """The task part of the script's cell ids: `--name`, else the file's stem made id-safe."""
    name = given if given is not None else re.sub(r"[^a-z0-9_]", "_", script.stem.lower())
    if not TASK_NAME.match(name):
        raise UsageError(explain(f"--name {name!r}", "cell ids split on '-'", TASK_NAME.pattern,
                                 "pass --name with lowercase letters, digits and underscores"))
    return name


def script_cells(matrix: Matrix, name: str, implementations: Collection[str] = (CORE,)) -> list[Cell]:
    """Every distinct backend of the matrix's cells (any task's) of the given implementations, as
    cells of the script."""
    seen: dict[tuple[str, int, str, str, str], Cell] = {}
    for cell in matrix.cells:
        if cell.implementation not in implementations:
            continue
        key = (cell.device, cell.processes, cell.strategy, cell.precision, cell.implementation)
        seen.setdefault(key, Cell(name, cell.device, cell.processes, cell.strategy, cell.precision,
                                  cell.implementation))
    return list(seen.values())


def reference_of(cell: Cell, reference: str) -> Cell:
    """The cell `cell` is compared with: `reference` is `{device}{n}-{strategy}` (at the cell's
    precision: the tolerance table is measured against a baseline of the same precision) or a
    full `{device}{n}-{strategy}-{precision}`."""
    if not _SHAPE.match(reference):
        raise UsageError(explain(
            f"--reference {reference!r}", "it is not a backend of the matrix",
            "{device}{processes}-{strategy}, optionally -{precision}: e.g. cpu1-single, cpu1-single-fp32",
            "pass one of that form"))
    full = reference if reference.count("-") == 2 else f"{reference}-{cell.precision}"
    # The pattern above admits only valid ids; the reference runs the cell's implementation.
    return dataclasses.replace(Cell.from_id(f"{cell.task}-{full}"), implementation=cell.implementation)


def arguments_for(arguments: list[str], cell: Cell, cell_dir: Path) -> list[str]:
    """The script's arguments with the placeholders of this cell filled in."""

    def fill(match: re.Match[str]) -> str:
        if match[1] == "processes":
            return str(cell.processes)
        if match[1] == "cell_dir":
            return str(cell_dir)
        if match[1] == "cell_id":
            return cell.id
        total = int(match[2])
        if total % cell.processes:
            raise UsageError(explain(
                f"script argument {match[0]!r} in cell {cell.id}", f"{total} does not split over "
                f"{cell.processes} processes", "a number every selected world size divides",
                "change the number, or leave this cell out with -k"))
        return str(total // cell.processes)

    return [_PLACEHOLDER.sub(fill, argument) for argument in arguments]
