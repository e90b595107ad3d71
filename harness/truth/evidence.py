"""Judging the evidence of what ran against the cell, before any number: a cell that asked for
ZeRO-3 bf16 and silently ran DDP fp32 must fail for that, even when its numbers land inside the
bf16 tolerance of the golden (they do: fp32 results are within bf16 tolerance of bf16 goldens).

The evidence comes from the rank (harness.rank.evidence): the strategy object, world size and
device, the DeepSpeed engine's ZeRO stage and partitioned parameters, the dtype the first
Linear layer computed in, and the loss scales the run recorded.
"""

from __future__ import annotations

from typing import Any

from harness.spec.cell import Cell
from harness.truth.record import Record

ACTIVATION_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def evidence_mismatch(cell: Cell, record: Record) -> str | None:
    """One sentence saying how what ran differs from what the cell asked for; None when it agrees."""
    evidence: dict[str, Any] | None = record.meta.get("evidence")
    if not isinstance(evidence, dict):
        return "the record carries no evidence of what ran (made by another harness version?)"
    asked = f"asked for {cell.strategy} {cell.precision} on {cell.device}{cell.processes}"
    deepspeed = evidence.get("deepspeed")
    if cell.is_deepspeed and deepspeed is None:
        return f"{asked}, the run had no DeepSpeed engine ({evidence.get('strategy_class')} ran)"
    if evidence.get("strategy") != cell.strategy:
        return f"{asked}, the run had {evidence.get('strategy')} ({evidence.get('strategy_class')})"
    if evidence.get("world_size") != cell.processes or evidence.get("device") != cell.device:
        return f"{asked}, the run had {evidence.get('device')}{evidence.get('world_size')}"
    if deepspeed is not None:
        if deepspeed.get("zero_stage") != cell.zero_stage:
            return f"{asked}, the engine ran ZeRO stage {deepspeed.get('zero_stage')}"
        if cell.zero_stage == 3 and not deepspeed.get("partitioned_parameters"):
            return f"{asked}, no parameter was partitioned ({deepspeed.get('parameters')} kept whole)"
    activations = evidence.get("activation_dtype")
    if activations is not None and activations != ACTIVATION_DTYPES[cell.precision]:
        return f"{asked}, the first Linear layer computed in {activations}"
    if cell.precision == "fp16" and not record.loss_scales:
        return f"{asked}, no loss scaler ran (no loss scale recorded)"
    if cell.precision != "fp16" and record.loss_scales:
        return f"{asked}, a loss scaler ran ({len(record.loss_scales)} loss scales recorded)"
    return None
