"""Judging a script cell: evidence of what ran first, then every recorded quantity against the
reference cell's record at the matrix's tolerance for the cell (harness.judge.compare)."""

from __future__ import annotations

from typing import Any

import torch

from harness.judge.compare import compare_record, diagnose
from harness.judge.dtype_names import COMPUTE_DTYPES
from harness.judge.outcome import CellResult, Status
from harness.judge.output_dtype import expected_output_dtype
from harness.plan.cell import Cell
from harness.plan.matrix import Matrix
from harness.record.record_format import Record


def script_evidence_mismatch(cell: Cell, evidence: dict[str, Any]) -> str | None:
    """How what the script ran differs from the cell; None when it agrees."""
    asked = f"asked for {cell.strategy} {cell.precision} on {cell.device}{cell.processes}"
    if not evidence:
        return f"{asked}, the script never called accelerator.backward or get_state_dict (nothing recorded)"
    ran = (f"{evidence.get('strategy')} {evidence.get('mixed_precision')} on "
           f"{evidence.get('device')}{evidence.get('world_size')}")
    if "accelerate" in evidence:  # what Hugging Face Accelerate said it ran (its DistributedType)
        ran += f" ({evidence['accelerate']})"
    asked_for = (cell.strategy, cell.processes, cell.device, cell.mixed_precision)
    if tuple(evidence.get(k) for k in ("strategy", "world_size", "device", "mixed_precision")) != asked_for:
        return f"{asked}, the script ran {ran}"
    if evidence.get("zero_stage") != cell.zero_stage:
        return f"{asked}, the DeepSpeed engine ran ZeRO stage {evidence.get('zero_stage')}"
    if evidence.get("loss_scaling") != (cell.precision == "fp16"):
        return f"{asked}, loss scaling was {'on' if evidence.get('loss_scaling') else 'off'}"
    return _computed_dtypes(cell, evidence, asked)


# The half dtypes, as evidence names them (a precision's own: harness.judge.dtype_names).
_HALF_DTYPES = frozenset({COMPUTE_DTYPES["fp16"], COMPUTE_DTYPES["bf16"]})


def _computed_dtypes(cell: Cell, evidence: dict[str, Any], asked: str) -> str | None:
    """The dtypes the model's modules output in training (accelerate_core/recording.py), against
    the precision: the precision object says what was asked, these what ran."""
    computed = evidence.get("computed_dtypes")
    if not isinstance(computed, list):
        return (f"{asked}, the record has no evidence of computed_dtypes (evidence that is missing is "
                "a failure)")
    wanted = COMPUTE_DTYPES[cell.precision]
    if wanted not in _HALF_DTYPES:
        seen = sorted(set(computed) & _HALF_DTYPES)
        return f"{asked}, the model's training forward computed in {', '.join(seen)}" if seen else None
    if wanted not in computed:
        return (f"{asked}, no module of the model computed in {wanted} in its training forward "
                f"(computed in: {', '.join(computed) or 'nothing floating'})")
    return None


def judge_script_cell(cell: Cell, record: Record, reference: Record, reference_cell: Cell,
                      matrix: Matrix, duration_s: float, emulated: bool) -> CellResult:
    tolerance = matrix.tolerance_for(cell.precision, cell.strategy)
    # A gathered tensor the reference computed in a half dtype is a model output (data keeps its
    # own dtype): it comes back in the dtype the cell's backend gives its outputs, as in the
    # matrix (FSDP2's root returns fp32 under a half policy; DeepSpeed keeps half).
    computed = frozenset(key for key, value in reference.eval_outputs.items()
                         if value.dtype in (torch.float16, torch.bfloat16))
    comparisons = compare_record(record, reference, tolerance, expected_output_dtype(cell), computed)
    extra: dict[str, Any] = {"reference": reference_cell.id, "evidence": record.meta.get("evidence"),
                             "losses": record.losses, "golden_losses": reference.losses}
    common: dict[str, Any] = {"comparisons": comparisons, "duration_s": round(duration_s, 3),
                              "emulated": emulated, "extra": extra}
    mismatch = script_evidence_mismatch(cell, record.meta.get("evidence") or {})
    if mismatch is not None:
        return CellResult(cell, Status.FAILED, f"evidence: {mismatch}", **common)
    if all(c.ok for c in comparisons):
        worst = max(comparisons, key=lambda c: c.tolerance_used, default=None)
        closest = f"; closest: {worst.quantity} at {worst.tolerance_used:.0%} of tolerance" if worst else ""
        return CellResult(cell, Status.PASSED, f"matches {reference_cell.id}{closest}", **common)
    # compare.py speaks of "the golden"; here the baseline is the script's own reference cell.
    reason = diagnose(cell.id, comparisons, record).replace("vs golden", "vs reference").replace(
        "the golden's", "the reference's")
    return CellResult(cell, Status.FAILED, f"against {reference_cell.id}: {reason}", **common)
