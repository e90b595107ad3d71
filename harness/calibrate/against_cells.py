"""Calibrated tolerances held against real cells: a run's passing cells judged again with each
task's calibrated tolerance (calibrated.task_tolerances). A cell that fails here lands further
from the golden than any benign variant of the reference did: either its backend does something
the variants do not model (a reduction in the half dtype, synchronised BatchNorm statistics), or
a bug the tolerance in force lets through. Either way those per-task tolerances are not ready to
be adopted; this is the check that says so before a matrix run does."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.calibrate.variants import splits_change_the_math
from harness.golden.golden_store import load_golden
from harness.judge.cell_verdict import golden_task_of
from harness.judge.compare import compare_record
from harness.judge.output_dtype import expected_output_dtype
from harness.layout.report_dir import ReportDir
from harness.plan.cell import Cell
from harness.plan.tolerances import FAMILIES, Tolerance
from harness.record.record_format import Record
from harness.tasks import get_task


@dataclass(frozen=True)
class CellCheck:
    cell_id: str
    ok: bool
    worst: str  # the quantity furthest out of the calibrated tolerance, with how far; or why unchecked
    tolerance_used: float  # at the worst element (1.0 = exactly at the calibrated limit)


def check_cells(report_dir: Path, per_task: dict[tuple[str, str, str], Tolerance]) -> list[CellCheck]:
    """Every cell that passed in `report_dir` (its report and records), judged again."""
    folder = ReportDir(report_dir)
    report = json.loads(folder.report_json.read_text(encoding="utf-8"))
    out = []
    for entry in report["cells"]:
        if entry["status"] != "passed":
            continue
        cell = Cell.from_id(entry["id"])
        golden_task = golden_task_of(cell.task)
        tolerance = per_task.get((golden_task, cell.precision, FAMILIES[cell.strategy]))
        uncovered = _uncovered(cell, golden_task)
        if tolerance is None or uncovered:
            why = uncovered or "not calibrated (no golden of its own here)"
            out.append(CellCheck(cell.id, True, why, 0.0))
            continue
        record = Record.load(folder.record(cell.id))
        golden = load_golden(golden_task, cell.precision)
        comparisons = compare_record(record, golden, tolerance, expected_output_dtype(cell))
        failing = [c for c in comparisons if not c.ok]
        if not failing:
            out.append(CellCheck(cell.id, True, "", 0.0))
            continue
        worst = max(failing, key=lambda c: c.tolerance_used)
        out.append(CellCheck(cell.id, False, f"{worst.quantity} |diff| {worst.max_abs_diff:.2e} > atol "
                             f"{worst.atol:.1e} + rtol {worst.rtol:.1e} x |golden|", worst.tolerance_used))
    return out


def _uncovered(cell: Cell, golden_task: str) -> str:
    """Why the calibration says nothing about this cell: its task's result depends on the split
    (the variants that split were not run for it), and the cell splits."""
    if cell.processes == 1:
        return ""
    # A synchronised task's BatchNorm is the two_ranks_sync_batchnorm variant's
    synchronised = bool(getattr(get_task(cell.task), "sync_batchnorm", False))
    why = splits_change_the_math(get_task(golden_task).build_model(), ignore_batchnorm=synchronised)
    return f"not covered: {why}" if why else ""
