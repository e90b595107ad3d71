"""--compare-records: this run's records against another environment's report dir.

Two uses: the judge's bit-for-bit rule for non-DeepSpeed cells reads the other records (only
between environments of one torch release: another torch may change any kernel's last bits),
and every cell with a record is told how its numbers moved (bit-identical / within tolerance /
diverged), informative only: the golden decides the verdict.
"""

from __future__ import annotations

from pathlib import Path

from harness.judge.outcome import CellResult
from harness.layout.report_dir import ReportDir
from harness.plan.cell import Cell
from harness.plan.matrix import Matrix


def compare_dir(compare_records: Path | None) -> Path | None:
    """Where the judge finds the other environment's records; None when there is none, or it ran
    another torch release (note_record_change then shows by how much the numbers moved)."""
    if compare_records is None:
        return None
    from importlib import metadata

    from harness.judge.version_diff import same_torch

    if not same_torch(compare_records, metadata.version("torch")):
        return None
    return ReportDir(compare_records).records


def note_record_change(compare_records: Path, matrix: Matrix, cell: Cell, result: CellResult,
                       stem: Path) -> None:
    """How the cell's numbers changed against the other environment's record, in the cell's
    report.json extra "record_change" (DeepSpeed cells too)."""
    from harness.judge.version_diff import other_environment, record_change
    from harness.record.record_format import Record

    try:
        record = Record.load(stem)
    except Exception:  # no record of its own (the cell errored): nothing to compare
        return
    other_name, _ = other_environment(compare_records)
    tolerance = matrix.tolerance_for(cell.precision, cell.strategy)
    result.extra["record_change"] = record_change(
        record, ReportDir(compare_records).record(cell.id), tolerance, other_name or str(compare_records))
