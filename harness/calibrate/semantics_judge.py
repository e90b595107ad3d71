"""The own-semantics check, part of every run's judging: a passing half-precision CPU cell whose
computation the reduction-order reference reproduces (the exact tier's cells,
harness.calibrate.exact_judge.why_not_in_tier) also has its final weights compared with that
reference, at the per-task tolerance measured for it (harness.plan.semantics_tolerances).

Why: the golden comparison has to allow a ZeRO bf16 cell the distance between DeepSpeed's
precision (the model held in bf16, masters copied from its rounded weights) and the golden's
autocast over fp32 weights: half a bf16 ulp of every weight with no bug at all, so a uniform
gradient error of 2-5% passes it (docs/calibration.md, section 2). The reference computes the
backend's own precision on the judging machine, so the check only has to allow what may
legitimately change its bits: a gradient error of 0.1% leaves it.

Computed once per task x precision x semantics in the judging process (a few hundredths of a
second each); this machine's own variation of it, which may widen a file's atol, only for a cell
that fails at the file's atol (widening can only turn a failure into a pass). Its comparisons
are named `semantics:state_dict/<key>` in report.json, and
`extra["semantics"]` says what the check made of the cell.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.calibrate.calibrated import SAFETY_FACTOR
from harness.calibrate.exact_judge import why_not_in_tier
from harness.calibrate.reduction_order import reduction_order_perturbation, reduction_order_reference
from harness.calibrate.semantics_noise import variation_here
from harness.calibrate.weights_file import two_digits_up
from harness.judge.cell_verdict import golden_task_of
from harness.judge.compare import compare_state_dicts
from harness.judge.outcome import CellResult, Comparison, Failure, Status
from harness.plan.cell import Cell, ResumeCell
from harness.plan.semantics_tolerances import SemanticsTolerance
from harness.plan.tolerances import Tolerance, ToleranceTable
from harness.record.record_format import Record

# The quantity name of an own-semantics comparison: f"{SEMANTICS_PREFIX}state_dict/<key>".
SEMANTICS_PREFIX = "semantics:"
HALF = ("fp16", "bf16")


def semantics_entry(cell: Cell, table: ToleranceTable, *,
                    widen: bool = True) -> tuple[SemanticsTolerance | None, str]:
    """The tolerance the cell's final weights get against its own-semantics reference, or None
    and why the cell is not checked so; `widen=False`: the file's entry as it stands, not yet
    widened to this machine's own variation (which costs two reference runs to measure)."""
    if isinstance(cell, ResumeCell):
        return None, "a resumed cell (its numbers carry a checkpoint's load, which no reference follows)"
    if cell.precision not in HALF:
        return None, "fp32: its golden comparison is already at fp32's tolerance"
    why = why_not_in_tier(cell)
    if why:
        return None, why
    task = golden_task_of(cell.task)
    semantics = reduction_order_perturbation(cell).name
    entry = table.semantics.get((cell.precision, task, semantics))
    if entry is None:
        return None, (f"no measured tolerance for {cell.precision} {task} {semantics} in the matrix's "
                      "semantics_per_task")
    return (widened_here(entry, cell) if widen else entry), ""


def widened_here(entry: SemanticsTolerance, cell: Cell) -> SemanticsTolerance:
    """`entry`, or, where this machine's own variation of the reference needs more (the file was
    measured on other CPUs), the atol that variation earns here at the same safety factor."""
    need, variant, where = variation_here(cell, entry.task)
    wanted = two_digits_up(SAFETY_FACTOR * need)
    if wanted <= entry.atol:
        return entry
    return replace(entry, atol=wanted, need=need, variant=variant, where=where,
                   reason=f"widened on this machine: {SAFETY_FACTOR:g} x {need:.3g} ({variant}, "
                          f"state_dict/{where}), above the file's atol {entry.atol:g} ({entry.reason})")


def semantics_comparisons(record: Record, reference: Record, entry: SemanticsTolerance) -> list[Comparison]:
    """The record's final weights against the reference's, each a `semantics:` comparison."""
    tolerance = Tolerance(entry.precision, f"semantics.{entry.section}", entry.rtol, entry.atol, entry.reason)
    return [replace(c, quantity=f"{SEMANTICS_PREFIX}{c.quantity}")
            for c in compare_state_dicts(record.state_dict, reference.state_dict, tolerance)]


def judge_semantics(result: CellResult, record_dir: Path, table: ToleranceTable) -> CellResult:
    """`result` with the own-semantics check applied: a passed cell of its scope whose final weights
    leave the tolerance fails (a divergence, named); every other result is returned as it was, with
    `extra["semantics"]` saying what the check made of it."""
    if result.status != Status.PASSED:
        return result
    entry, why = semantics_entry(result.cell, table, widen=False)
    if entry is None:
        return replace(result, extra={**result.extra, "semantics": f"not checked: {why}"})
    try:
        reference = reduction_order_reference(result.cell, entry.task)
        record = Record.load(record_dir)
        comparisons = semantics_comparisons(record, reference, entry)
        failing = [c for c in comparisons if not c.ok]
        if failing:
            # Widening only ever raises the atol, so it can only turn a failure into a pass: this
            # machine's own variation is measured (two more reference runs) when the file's fails.
            widened = widened_here(entry, result.cell)
            if widened.atol > entry.atol:
                entry = widened
                comparisons = semantics_comparisons(record, reference, entry)
                failing = [c for c in comparisons if not c.ok]
    except Exception as exc:  # the check cannot be made: said, never passed over
        return replace(result, status=Status.ERROR, failure=None,
                       reason=f"the own-semantics reference ({entry.semantics}) could not be computed: "
                              f"{type(exc).__name__}: {exc}")
    worst = max(comparisons, key=lambda c: c.tolerance_used, default=None)
    against = f"the {entry.semantics} reference (this backend's own precision, computed here)"
    if not failing:
        closest = ("; bit-identical" if worst is None or worst.max_abs_diff == 0
                   else f"; closest {worst.quantity} at {worst.tolerance_used:.0%}")
        return replace(result, comparisons=[*result.comparisons, *comparisons],
                       extra={**result.extra, "semantics": f"final weights within atol {entry.atol:g} of "
                                                           f"{against}{closest}"})
    head = max(failing, key=lambda c: c.tolerance_used)
    more = f" and {len(failing) - 1} more" if len(failing) > 1 else ""
    reason = (f"{result.cell.strategy} {result.cell.precision}: final weights "
              f"`{head.quantity.removeprefix(SEMANTICS_PREFIX + 'state_dict/')}`{more} leave {against} "
              f"(max |diff| {head.max_abs_diff:.3g}, {head.tolerance_used:.3g}x its measured atol "
              f"{entry.atol:g}), inside the golden's tolerance")
    return replace(result, status=Status.FAILED, failure=Failure.DIVERGENCE, reason=reason,
                   comparisons=[*result.comparisons, *comparisons],
                   extra={**result.extra, "semantics": "differs from its own-semantics reference"})
