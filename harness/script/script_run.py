"""Running a script over the selected cells: each reference cell first, then the cells compared
with it, one launch each, one after another (a launch of a script is a whole training run)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import RecordError
from harness.judge.outcome import CellResult, Status
from harness.plan.availability import Host, check
from harness.plan.cell import Cell
from harness.plan.matrix import Matrix
from harness.record.record_format import Record
from harness.script.cells import arguments_for, reference_of
from harness.script.judge import judge_script_cell, script_evidence_mismatch
from harness.script.record import load_script_record
from harness.script.script_launch import ScriptLaunch, run_script_cell


@dataclass(frozen=True)
class ScriptRun:
    script: Path
    arguments: list[str]
    matrix: Matrix
    reference: str  # "cpu1-single" (at each cell's precision) or a full "cpu1-single-fp32"
    report_dir: Path
    timeout_s: float
    host: Host


def run_script(run: ScriptRun, cells: list[Cell],
               on_result: Callable[[CellResult], None] = lambda _r: None) -> list[CellResult]:
    """One result per cell of `cells` (in order), plus one per reference cell not among them."""
    results: dict[str, CellResult] = {}
    references: dict[str, Record | str] = {}  # reference id -> its record, or why it has none
    order = _reference_first(cells, run.reference)
    for cell in order:
        verdict = check(cell, run.host)
        if not verdict.runnable:
            results[cell.id] = CellResult(cell, Status.SKIPPED, verdict.reason)
            references[cell.id] = f"was skipped ({verdict.reason})"  # in case it is a reference
            on_result(results[cell.id])
            continue
        reference_cell = reference_of(cell, run.reference)
        is_reference = reference_cell == cell
        if not is_reference and isinstance(references.get(reference_cell.id), str):
            results[cell.id] = CellResult(cell, Status.ERROR, f"not judged: its reference cell "
                                          f"{reference_cell.id} {references[reference_cell.id]}")
            on_result(results[cell.id])
            continue
        cell_dir = run.report_dir / "cells" / cell.id
        launch = run_script_cell(cell, run.script, arguments_for(run.arguments, cell, cell_dir), cell_dir,
                                 emulated=verdict.emulated, timeout_s=run.timeout_s)
        result, record = _outcome(launch, verdict.emulated)
        if is_reference:
            references[cell.id] = record if record is not None else f"ended {result.status.value}"
            if record is not None:
                mismatch = script_evidence_mismatch(cell, record.meta.get("evidence") or {})
                result = (CellResult(cell, Status.FAILED, f"evidence: {mismatch}",
                                     duration_s=result.duration_s)
                          if mismatch else CellResult(cell, Status.PASSED, "reference cell: the other cells "
                                                      "of its precision are compared with it",
                                                      duration_s=result.duration_s,
                                                      extra={"losses": record.losses}))
                if mismatch:
                    references[cell.id] = f"did not run what it asked for ({mismatch})"
        elif record is not None:
            reference = references[reference_cell.id]
            assert isinstance(reference, Record)  # references run first; a failed one is handled above
            result = judge_script_cell(cell, record, reference, reference_cell, run.matrix,
                                       launch.seconds, verdict.emulated)
        results[cell.id] = result
        on_result(result)
    return [results[c.id] for c in order]


def _reference_first(cells: list[Cell], reference: str) -> list[Cell]:
    """The reference cells (run even when not selected), then the rest in the order given."""
    wanted = list(dict.fromkeys(reference_of(c, reference) for c in cells))
    return wanted + [c for c in cells if c not in wanted]


def _outcome(launch: ScriptLaunch, emulated: bool) -> tuple[CellResult, Record | None]:
    cell, seconds = launch.cell, round(launch.seconds, 3)
    detail = launch.output_tail()
    common: dict[str, Any] = {"duration_s": seconds, "emulated": emulated, "detail": detail,
              "extra": {"log": str(launch.log)}}
    if launch.returncode is None:
        why = "no exit within --timeout; output tail in detail"
        return CellResult(cell, Status.TIMEOUT, why, **common), None
    if launch.returncode != 0:
        last = next((line for line in reversed(detail.splitlines()) if line.strip()), "(no output)")
        return CellResult(cell, Status.ERROR, f"the script exited {launch.returncode}: {last.strip()}",
                          **common), None
    try:
        record = load_script_record(launch.record, cell)
    except RecordError as exc:
        return CellResult(cell, Status.ERROR, str(exc), **common), None
    return CellResult(cell, Status.PASSED, "", **common), record
