"""Judging resume cells (docs/resume.md).

A destination's record is the whole run (harness.rank.resume_point.combine: the source's steps up to
the checkpoint, the destination's after it, its eval outputs and final weights), so it is judged
like any cell's, against the same golden, at the destination's tolerance (judge_record). Before
the numbers, the resume's own evidence: the checkpoint says it was written by the source's
strategy and world size, the source took exactly the steps it should, and the core restored the
position where the source stopped. A failing resume cell's diagnosis says where the run was
resumed and whether it left the golden before that point (the source's part) or after it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.judge.cell_verdict import judge_record
from harness.judge.evidence_check import evidence_mismatch
from harness.judge.outcome import CellResult, Failure, Status
from harness.plan.cell import GOLDEN_SOURCE, ResumeCell
from harness.plan.matrix import Matrix
from harness.plan.resume_cells import ResumePoint
from harness.record.record_format import Record

_STEP = re.compile(r"^(?:optimizer )?step (\d+)")
MIXED_PRECISION = {"fp32": "no", "fp16": "fp16", "bf16": "bf16"}


def source_problem(record_stem: Path, checkpoint: Path) -> str | None:
    """Why a source left nothing a destination can resume from; None when it did."""
    if not (checkpoint / "manifest.json").is_file():
        present = sorted(p.name for p in checkpoint.iterdir()) if checkpoint.is_dir() else []
        return (f"no complete checkpoint at {checkpoint} (no manifest.json; files: "
                f"{', '.join(present) or 'none'})")
    try:
        Record.load(record_stem)
    except Exception as exc:
        return f"its record of the steps before the checkpoint is unusable: {exc}"
    return None


def judge_resume(cell: ResumeCell, records_dir: Path, *, duration_s: float, emulated: bool, env_name: str,
                 matrix: Matrix, task: Any, compare_dir: Path | None = None) -> CellResult:
    """`task`: the cell's harness.tasks Task (for where its checkpoint sits in the run)."""
    point = ResumePoint.of(task, cell.resume_step)
    result = judge_record(cell, records_dir / cell.id, duration_s=duration_s, emulated=emulated,
                          env_name=env_name, matrix=matrix, compare_dir=compare_dir)
    result.extra["resume"] = {"source": cell.source, "checkpoint": cell.checkpoint_name,
                              "point": point.describe()}
    if result.status == Status.ERROR:
        return result
    where = f"resumed from {cell.checkpoint_name} at {point.describe()}"
    mismatch = resume_mismatch(cell, Record.load(records_dir / cell.id), point)
    source = cell.source_cell
    if mismatch is None and source is not None:  # the source really ran what it names
        found = evidence_mismatch(source, Record.load(records_dir / cell.checkpoint_name))
        mismatch = f"its source {source.id}: {found}" if found else None
    if mismatch is not None:
        result.status, result.failure = Status.FAILED, Failure.EVIDENCE
        result.reason = f"resume evidence: {mismatch} ({where})"
        return result
    if result.status == Status.FAILED and result.failure == Failure.DIVERGENCE:
        result.reason = f"{where}; {_side(result, point)}: {result.reason}"
    elif result.status == Status.FAILED:
        result.reason = f"{where}: {result.reason}"
    return result


def resume_mismatch(cell: ResumeCell, record: Record, point: ResumePoint) -> str | None:
    """How the resume itself differs from what the cell asked for; None when it agrees."""
    evidence = record.meta.get("evidence") or {}
    resume = evidence.get("resume") if isinstance(evidence, dict) else None
    if not isinstance(resume, dict) or resume.get("role") != "destination":
        return "the destination's record carries no evidence that it loaded a checkpoint"
    if resume.get("source_losses") != point.micro_steps:
        return (f"the source recorded {resume.get('source_losses')} micro-steps before saving, "
                f"expected {point.micro_steps}")
    restored = (resume.get("epoch"), resume.get("batch"))
    if restored != (point.epoch, point.batch):
        return (f"after load_state the core continued at epoch {restored[0]}, batch {restored[1]}; the "
                f"source saved at epoch {point.epoch} after batch {point.batch}")
    writer = resume.get("manifest_writer")
    if not isinstance(writer, dict):
        return "the checkpoint has no manifest naming its writer (not the neutral format?)"
    source = cell.source_cell
    wanted = ("reference", 1) if source is None else (source.strategy, source.processes)
    if (writer.get("strategy"), writer.get("world_size")) != wanted:
        what = GOLDEN_SOURCE if source is None else source.id
        return (f"the checkpoint says it was written by {writer.get('strategy')} on "
                f"{writer.get('world_size')} process(es), its source {what} is {wanted[0]} on {wanted[1]}")
    if writer.get("mixed_precision") != MIXED_PRECISION[cell.precision]:
        return f"the checkpoint was written in mixed precision {writer.get('mixed_precision')!r}"
    return None


def _side(result: CellResult, point: ResumePoint) -> str:
    """Whether the run left the golden before the checkpoint (the source's part) or after it."""
    firsts = []
    for comparison in result.comparisons:
        if comparison.ok or comparison.quantity not in ("losses", "lrs"):
            continue
        match = _STEP.match(comparison.first_divergence or "")
        if match:
            limit = point.micro_steps if comparison.quantity == "losses" else point.step
            firsts.append(int(match[1]) < limit)
    if any(firsts):
        return "it left the golden BEFORE the checkpoint (in the source's part)"
    if firsts:
        return "the source's part matches the golden; it leaves it AFTER the resume point"
    return "the per-step series match the golden; the end of the run does not"
