"""Turning what a launch left behind into a CellResult: compare, diagnose, apply expectations.

Runs in the parent while the launch goes on with the next cell, so comparing costs no wall time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.spec.cell import Cell
from harness.spec.matrix import Expected, Matrix
from harness.truth.evidence import evidence_mismatch
from harness.truth.outcome import CellResult, Comparison, Status


def new_result(cell: Cell, status: Status, reason: str = "", **kwargs: Any) -> CellResult:
    return CellResult(
        cell=cell,
        status=status,
        reason=reason,
        **kwargs,
    )


def golden_task_of(task_name: str) -> str:
    """The task whose golden a cell is compared with (a canary borrows its base task's)."""
    from harness.tasks import get_task

    return str(getattr(get_task(task_name), "golden_of", None) or task_name)


def judge_record(
    cell: Cell,
    record_stem: Path,
    *,
    duration_s: float,
    emulated: bool,
    env_name: str,
    matrix: Matrix,
    compare_dir: Path | None = None,
) -> CellResult:
    """Load the cell's record and compare it with its golden, at the tolerance of the matrix in
    use (and, optionally, with another environment's record of the same cell)."""
    from harness.truth.compare import compare_record, diagnose
    from harness.truth.golden import load_golden
    from harness.truth.record import Record

    common: dict[str, Any] = {"duration_s": duration_s, "emulated": emulated, "environment": env_name}
    try:
        record = Record.load(record_stem)
        golden = load_golden(golden_task_of(cell.task), cell.precision)
        tolerance = matrix.tolerance_for(cell.precision, cell.strategy)
    except Exception as exc:  # RecordError, GoldenError, a bad tolerance table: the cell is not judged
        return new_result(cell, Status.ERROR, f"{type(exc).__name__}: {exc}", **common)
    comparisons = list(compare_record(record, golden, tolerance))
    common["extra"] = {
        "losses": [float(x) for x in record.losses],
        "golden_losses": [float(x) for x in golden.losses],
        "evidence": record.meta.get("evidence"),
    }
    # Evidence first: numbers that happen to be close prove nothing about a backend that never ran.
    mismatch = evidence_mismatch(cell, record)
    if mismatch is not None:
        return new_result(cell, Status.FAILED, f"evidence: {mismatch}", comparisons=comparisons, **common)
    reason = ""
    if not all(c.ok for c in comparisons):
        reason = diagnose(cell.id, comparisons, record)
    if compare_dir is not None and not cell.is_deepspeed:
        cross, note = cross_environment(record, compare_dir / cell.id)
        comparisons.append(cross)
        common["extra"]["cross_environment"] = note
        if not cross.ok and not reason:
            reason = note
    status = Status.PASSED if all(c.ok for c in comparisons) else Status.FAILED
    return new_result(cell, status, reason, comparisons=comparisons, **common)


def cross_environment(record: Any, other_stem: Path) -> tuple[Comparison, str]:
    """Bit-for-bit equality of every tensor with the other environment's record of this cell."""
    import torch

    from harness.truth.record import Record

    try:
        other = Record.load(other_stem)
    except Exception as exc:
        note = f"no record of the other environment to compare with ({exc})"
        return Comparison("cross_environment", False, float("nan"), float("nan"), 0.0, 0.0, note=note), note
    mine, theirs = record.tensors(), other.tensors()
    differing = sorted(
        k
        for k in mine.keys() | theirs.keys()
        if k not in mine or k not in theirs or not torch.equal(mine[k], theirs[k])
    )
    if record.skipped_steps != other.skipped_steps:
        differing.append("skipped_steps")
    worst = 0.0
    for key in differing:
        if key in mine and key in theirs and mine[key].shape == theirs[key].shape:
            diff = (mine[key].double() - theirs[key].double()).abs()
            worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
    where = str(other_stem.parent.parent)
    if differing:
        note = f"differs from the record of {where}: {', '.join(differing[:5])}"
    else:
        note = f"bit-identical to the record of {where} ({len(mine)} tensors)"
    comparison = Comparison(
        "cross_environment",
        not differing,
        worst,
        0.0,
        0.0,
        0.0,
        first_divergence=differing[0] if differing else None,
        note=note,
    )
    return comparison, note


def apply_expected(result: CellResult, expected: Expected | None) -> CellResult:
    """A declared expected failure: failing is `xfailed`, passing is `xpassed` (both reported)."""
    if expected is None or result.status == Status.SKIPPED:
        return result
    if result.status == Status.PASSED:
        result.status = Status.XPASSED
        result.reason = f"declared expected to fail ({expected.reason}), yet it passed"
    elif result.status.is_unexpected_failure:
        observed = result.reason
        result.extra["observed"] = f"{result.status.value}: {observed}"
        result.status = Status.XFAILED
        result.reason = f"{expected.reason} (observed: {observed})" if observed else expected.reason
    return result
