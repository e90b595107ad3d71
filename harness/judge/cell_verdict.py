"""Turning what a launch left behind into a CellResult: compare, diagnose, apply expectations.

Runs in the parent while the launch goes on with the next cell, so comparing costs no wall time.

The order of judgement: a record that cannot be read, or no golden, is `error` (not judged);
evidence of another backend than the cell's is `failed` (evidence); a multi-process cell of a task
that draws random numbers during training is `failed` (randomness) whatever its numbers, since
its processes draw other streams than the single-process golden and a pass would be luck; then
the numbers (divergence).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.golden.global_rng import GLOBAL_RNG_LOCK
from harness.judge.evidence_check import evidence_mismatch
from harness.judge.outcome import CellResult, Comparison, Failure, Status
from harness.plan.cell import Cell, ResumeCell
from harness.plan.matrix import Expected, Matrix
from harness.plan.tolerances import FAMILIES

RANDOMNESS = (
    "draws random numbers during training (dropout?): per-process streams diverge from a "
    "single-process golden"
)


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
    from harness.golden.golden_store import load_golden
    from harness.judge.compare import compare_record, diagnose
    from harness.judge.output_dtype import expected_output_dtype
    from harness.record.record_format import Record

    common: dict[str, Any] = {"duration_s": duration_s, "emulated": emulated, "environment": env_name}
    try:
        record = Record.load(record_stem)
        golden = load_golden(golden_task_of(cell.task), cell.precision, matrix.golden_dir)
        tolerance = matrix.tolerance_for(cell.precision, family_strategy(cell),
                                         weights_task(cell, golden.task))
    except Exception as exc:  # RecordError, GoldenError, a bad tolerance table: the cell is not judged
        return new_result(cell, Status.ERROR, f"{type(exc).__name__}: {exc}", **common)
    comparisons = list(compare_record(record, golden, tolerance, expected_output_dtype(cell)))
    evidence = record.meta.get("evidence")
    common["extra"] = {
        "losses": [float(x) for x in record.losses],
        "golden_losses": [float(x) for x in golden.losses],
        "evidence": evidence,
    }
    # Evidence first: numbers that happen to be close prove nothing about a backend that never ran.
    mismatch = evidence_mismatch(cell, record)
    if mismatch is not None:
        return new_result(cell, Status.FAILED, f"evidence: {mismatch}", comparisons=comparisons,
                          failure=Failure.EVIDENCE, **common)
    reason = ""
    if not all(c.ok for c in comparisons):
        reason = diagnose(cell.id, comparisons, record, buffer_names(cell.task),
                          first_loss_moved(record, golden))
    if compare_dir is not None and not cell.is_deepspeed:
        cross, note = cross_environment(record, compare_dir / cell.id)
        comparisons.append(cross)
        common["extra"]["cross_environment"] = note
        if not cross.ok and not reason:
            reason = note
    draws = random_draws(evidence)
    if draws and cell.processes > 1:
        numbers = reason or diagnose(cell.id, comparisons, record)
        return new_result(cell, Status.FAILED, f"{RANDOMNESS} ({draws}); {numbers}",
                          comparisons=comparisons, failure=Failure.RANDOMNESS, **common)
    if all(c.ok for c in comparisons):
        return new_result(cell, Status.PASSED, reason, comparisons=comparisons, **common)
    return new_result(cell, Status.FAILED, reason, comparisons=comparisons, failure=Failure.DIVERGENCE,
                      **common)


def random_draws(evidence: object) -> str:
    """"k of n training steps drew from the RNG" from a record's evidence ("" when none did, or
    the record predates the check)."""
    if not isinstance(evidence, dict):
        return ""
    draws = evidence.get("random_draws")
    if not isinstance(draws, dict) or not draws.get("drawing"):
        return ""
    steps, source = draws.get("steps", "?"), draws.get("generators") or "the RNG"
    return f"{draws['drawing']} of {steps} training steps drew from {source}"


def first_loss_moved(record: Any, golden: Any) -> bool:
    """The step-0 loss (a forward pass before any update) differs from the golden's beyond fp32
    noise (torch.testing's fp32 tolerance), whatever the cell's own tolerance."""
    if not record.losses or not golden.losses:
        return False
    mine, theirs = float(record.losses[0]), float(golden.losses[0])
    return not abs(mine - theirs) <= 1e-5 + 1.3e-6 * abs(theirs)


def buffer_names(task_name: str) -> frozenset[str]:
    """The state-dict keys of the task's model that are buffers (running statistics), to name
    them apart from weights in a diagnosis; empty when the task cannot be built here."""
    from harness.tasks import get_task

    try:
        with GLOBAL_RNG_LOCK:
            model = get_task(golden_task_of(task_name)).build_model()
    except Exception:  # a diagnosis must never fail because of its wording
        return frozenset()
    return frozenset(name for name, _ in model.named_buffers())


def cross_environment(record: Any, other_stem: Path) -> tuple[Comparison, str]:
    """Bit-for-bit equality of every tensor with the other environment's record of this cell."""
    from harness.record.record_format import Record

    try:
        other = Record.load(other_stem)
    except Exception as exc:
        note = f"no record of the other environment to compare with ({exc})"
        return Comparison("cross_environment", False, float("nan"), float("nan"), 0.0, 0.0, note=note), note
    mine, theirs = record.tensors(), other.tensors()
    differing = sorted(
        k
        for k in mine.keys() | theirs.keys()
        if k not in mine or k not in theirs or not same_bits(mine[k], theirs[k])
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


def same_bits(a: Any, b: Any) -> bool:
    """Bit for bit: same dtype, shape and bytes (so a NaN at the same place, which torch.equal
    calls different, is the same)."""
    import torch

    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    mine, theirs = (t.reshape(-1).contiguous().view(torch.uint8) for t in (a, b))
    return bool(mine.equal(theirs))


def apply_expected(result: CellResult, expected: Expected | None) -> CellResult:
    """A declared expected failure: failing the declared way (its `status`, and its `match` found
    in the diagnosis) is `xfailed`; passing is `xpassed`; failing another way stays an unexpected
    failure, its reason saying what was declared."""
    if expected is None or result.status == Status.SKIPPED:
        return result
    if expected.index:  # which entry the cell was judged by (the version table reads it)
        result.extra["expected_entry"] = expected.index
    if result.status == Status.PASSED:
        result.status = Status.XPASSED
        result.reason = f"declared expected to fail ({expected.reason}), yet it passed"
        return result
    if not result.status.is_unexpected_failure:
        return result
    observed = result.reason
    mismatch = _differs_from_declared(result, expected)
    if mismatch:
        result.extra["expected"] = {"status": expected.status, "reason": expected.reason,
                                    "match": expected.diagnosis.pattern if expected.diagnosis else None}
        result.reason = f"{observed} [declared expected to fail ({expected.reason}), but {mismatch}]"
        return result
    result.extra["observed"] = f"{result.status.value}: {observed}"
    result.status = Status.XFAILED
    result.reason = f"{expected.reason} (observed: {observed})" if observed else expected.reason
    return result


def failure_kind(result: CellResult) -> str:
    """The kind of failure as an [[expected]] entry's `status` names it."""
    if result.status == Status.FAILED:
        return "exception" if result.failure == Failure.EXCEPTION else "failed"
    return result.status.value


def _differs_from_declared(result: CellResult, expected: Expected) -> str:
    """"" when the failure is the declared one; else how it differs, for the reason."""
    kind = failure_kind(result)
    if kind != expected.status:
        return f"it failed with status {kind!r} instead of {expected.status!r}"
    if expected.diagnosis is not None:
        text = result.reason + ("\n" + result.detail if kind == "exception" else "")
        if not expected.diagnosis.search(text):
            return f"its diagnosis does not match {expected.diagnosis.pattern!r}"
    return ""


def matches_declared(result: CellResult, expected: Expected | None) -> bool:
    """Would `apply_expected` turn this (unjudged-by-expectations) result into xfailed?"""
    return (expected is not None and result.status.is_unexpected_failure
            and result.status != Status.XPASSED and not _differs_from_declared(result, expected))


def family_strategy(cell: Cell) -> str:
    """The strategy whose family's tolerance judges the cell: its own, but for a resume cell
    whose source is a ZeRO cell, the source's. Such a run took its first steps under ZeRO's half
    precision (the model held in the half dtype, masters copied from its rounded weights), and
    everything after the checkpoint starts from there: it carries the noise the zero family's
    entries were measured on, which a plain destination's entries never saw. Measured: the same
    `lm` ZeRO-3 bf16 checkpoint finishes 0.0312 (one bf16 ulp of a logit) from the golden's eval
    logits whether resumed under ZeRO-3 or DDP, 53% of the zero family's tolerance and 85% of the
    plain one's. Every zero entry is at least its plain twin (matrix.toml), so this is the wider
    of the two ends' tolerances; a ZeRO destination is judged by its own family already."""
    source = cell.source_cell if isinstance(cell, ResumeCell) else None
    if source is not None and FAMILIES[source.strategy] == "zero":
        return source.strategy
    return cell.strategy


def weights_task(cell: Cell, golden_task: str) -> str | None:
    """The task whose per-task tolerances the cell gets (None: the family's alone). A resumed
    cell's numbers carry its source's noise and a checkpoint's load too, which the variants behind
    those tolerances never measured, unless source and destination are plain-family cells (or the
    source is the golden and the destination plain): fp32 masters handed over as they are. A ZeRO
    source hands over half-precision weights; a ZeRO destination rounds what it loads to half.
    Only CPU cells: the noise behind the entries was measured with CPU kernels (calibrate runs the
    reference on the CPU); a GPU's round otherwise, unmeasured, so a GPU cell keeps the family's."""
    if cell.device != "cpu":
        return None
    if not isinstance(cell, ResumeCell):
        return golden_task
    source = cell.source_cell
    if FAMILIES[cell.strategy] != "plain" or (source is not None and FAMILIES[source.strategy] != "plain"):
        return None
    return golden_task
