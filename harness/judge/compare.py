"""Judging a record against its golden: one `Comparison` per quantity, and a one-sentence
diagnosis of what went wrong and when.

An element passes when |record - golden| <= atol + rtol * |golden| (torch.testing's rule). The
tolerance is the matrix's (harness.plan.tolerances), handed in by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from harness.judge.outcome import Comparison
from harness.judge.output_dtype import MODEL_OUTPUTS
from harness.plan.cell import Cell
from harness.plan.tolerances import EXACT, LR_TOLERANCE, Tolerance
from harness.record.record_format import Record


def compare_record(record: Record, golden: Record, tolerance: Tolerance,
                   output_dtype: torch.dtype | None = None,
                   model_outputs: frozenset[str] = MODEL_OUTPUTS) -> list[Comparison]:
    """Every quantity the golden has (and anything the record has that it lacks). Each tensor must
    have the golden's dtype, except the floating eval outputs the model computed (`model_outputs`,
    eval keys) when `output_dtype` says which dtype the backend's precision semantics give them
    (harness.judge.output_dtype)."""
    out = [
        _values("losses", torch.tensor(record.losses), torch.tensor(golden.losses),
                tolerance.for_quantity("losses"), "step"),
        # Learning rates are Python floats set by the scheduler, whatever the precision or backend:
        # any difference is a step taken at the wrong time, so they get no precision allowance.
        _values("lrs", _lrs(record), _lrs(golden), LR_TOLERANCE, "optimizer step"),
        _skipped(record, golden),
        # Loss scales are powers of two set by the scaling policy: a policy that halves on
        # another step, or starts elsewhere, is a different policy, so they must match exactly.
        _values("loss_scales", torch.tensor(record.loss_scales, dtype=torch.float64),
                torch.tensor(golden.loss_scales, dtype=torch.float64), EXACT, "optimizer step"),
    ]
    out += _tensors("eval", record.eval_outputs, golden.eval_outputs, tolerance, output_dtype, model_outputs)
    out += compare_state_dicts(record.state_dict, golden.state_dict, tolerance)
    return out


def compare_state_dicts(mine: Mapping[str, torch.Tensor], theirs: Mapping[str, torch.Tensor],
                        tolerance: Tolerance) -> list[Comparison]:
    """Every key of either state dict, as `state_dict/<key>` comparisons (dtype included)."""
    return _tensors("state_dict", mine, theirs, tolerance, None, frozenset())


def _tensors(prefix: str, mine: Mapping[str, torch.Tensor], theirs: Mapping[str, torch.Tensor],
             tolerance: Tolerance, output_dtype: torch.dtype | None,
             model_outputs: frozenset[str]) -> list[Comparison]:
    out = []
    for key in sorted(set(mine) | set(theirs)):
        name = f"{prefix}/{key}"
        if key not in mine:
            out.append(_absent(name, tolerance, "missing from the record"))
        elif key not in theirs:
            out.append(_absent(name, tolerance, "in the record but not in the golden"))
        else:
            wanted = theirs[key].dtype
            if (prefix == "eval" and key in model_outputs and output_dtype is not None
                    and wanted.is_floating_point):
                wanted = output_dtype
            out.append(_values(name, mine[key], theirs[key], tolerance.for_quantity(prefix), "index", wanted))
    return out


def _lrs(record: Record) -> torch.Tensor:
    return torch.tensor(record.lrs, dtype=torch.float64).reshape(len(record.lrs), -1)


def _absent(name: str, tol: Tolerance, why: str) -> Comparison:
    return Comparison(quantity=name, ok=False, max_abs_diff=math.inf, max_rel_diff=math.inf,
                      atol=tol.atol, rtol=tol.rtol, first_divergence="whole tensor",
                      tolerance_used=math.inf, note=why)


def _skipped(record: Record, golden: Record) -> Comparison:
    differ = sorted(set(record.skipped_steps) ^ set(golden.skipped_steps))
    return Comparison(
        quantity="skipped_steps", ok=not differ, max_abs_diff=float(len(differ)),
        max_rel_diff=float(len(differ)), atol=0.0, rtol=0.0,
        first_divergence=f"optimizer step {differ[0]}" if differ else None,
        tolerance_used=math.inf if differ else 0.0,
        note=(f"skipped {record.skipped_steps}, golden skipped {golden.skipped_steps}" if differ else None),
    )


def _values(name: str, mine: torch.Tensor, theirs: torch.Tensor, tol: Tolerance, unit: str,
            wanted_dtype: torch.dtype | None = None) -> Comparison:
    notes = []
    a, b = mine.detach().to(torch.float64), theirs.detach().to(torch.float64)
    if a.shape != b.shape:
        notes.append(f"shape {tuple(a.shape)} vs golden {tuple(b.shape)}")
        return Comparison(quantity=name, ok=False, max_abs_diff=math.inf, max_rel_diff=math.inf,
                          atol=tol.atol, rtol=tol.rtol, first_divergence="shape",
                          tolerance_used=math.inf, note="; ".join(notes))
    diff = (a - b).abs()
    allowed = tol.atol + tol.rtol * b.abs()
    # Equal infinities agree; NaN never does, not even with a NaN in the golden (a golden is made
    # finite, so a NaN there is a broken golden, not a value to match).
    same_nonfinite = (a == b) & ~torch.isfinite(b)
    bad = ~(diff <= allowed) & ~same_nonfinite
    finite = torch.isfinite(diff)
    diff = torch.where(same_nonfinite, torch.zeros_like(diff), torch.where(finite, diff, math.inf))
    rel = diff / b.abs().clamp_min(torch.finfo(torch.float64).tiny)
    used = torch.where(diff == 0, torch.zeros_like(diff), diff / allowed.clamp_min(1e-300))
    nonfinite = ~torch.isfinite(a) & torch.isfinite(b)
    if nonfinite.any():
        index = _where(int(nonfinite.flatten().nonzero()[0]), a.shape, unit)
        kind = "NaN" if a.flatten()[nonfinite.flatten()][0].isnan() else "Inf"
        notes.append(f"{kind} first at {index}")
    if b.isnan().any():
        at = _where(int(b.isnan().flatten().nonzero()[0]), b.shape, unit)
        notes.append(f"the golden holds NaN (first at {at})")
    first = _where(int(bad.flatten().nonzero()[0]), a.shape, unit) if bad.any() else None
    wanted = theirs.dtype if wanted_dtype is None else wanted_dtype
    if mine.dtype != wanted:
        # A backend that hands out a state dict or outputs in another dtype than the plain
        # reference's (bf16 weights where the golden's are fp32) is a different result even when
        # the values round to within tolerance: it fails, whatever the numbers.
        whose = "the golden's is" if wanted == theirs.dtype else "the backend's precision gives"
        notes.insert(0, f"dtype {_dtype(mine)} where {whose} {str(wanted).removeprefix('torch.')}")
        return Comparison(quantity=name, ok=False, max_abs_diff=_max(diff), max_rel_diff=_max(rel),
                          atol=tol.atol, rtol=tol.rtol, first_divergence="dtype",
                          tolerance_used=math.inf, note="; ".join(notes))
    return Comparison(
        quantity=name, ok=not bool(bad.any()),
        max_abs_diff=_max(diff), max_rel_diff=_max(rel), atol=tol.atol, rtol=tol.rtol,
        first_divergence=first, tolerance_used=_max(used), note="; ".join(notes) or None,
    )


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _max(values: torch.Tensor) -> float:
    return float(values.max()) if values.numel() else 0.0


def _where(flat: int, shape: torch.Size, unit: str) -> str:
    if len(shape) == 0:
        return "the value"
    position = []
    for size in reversed(shape):
        position.append(flat % size)
        flat //= size
    position.reverse()
    if unit == "index":
        return f"index {tuple(position)}"
    # Per-step series: the first axis is time, any second one a param group.
    return f"{unit} {position[0]}" + (f" (param group {position[1]})" if len(position) > 1 else "")


def diagnose(cell_id: str, comparisons: list[Comparison], record: Record | None,
             buffers: frozenset[str] = frozenset(), first_loss_moved: bool = False) -> str:
    """One sentence: what left tolerance first and where, then how the loss scale moved.

    `buffers`: the state-dict keys that are the model's buffers (BatchNorm's running statistics),
    named "buffers" rather than "weights". `first_loss_moved`: the step-0 loss differs from the
    golden's beyond fp32 noise, even if within this cell's tolerance. A multi-process run whose
    step-0 loss differs (the forward pass, before any update) while a buffer is off points at
    statistics computed per rank."""
    cell: Cell | None
    try:
        cell = Cell.from_id(cell_id)
        prefix = f"{cell.strategy} {cell.precision}"
    except ValueError:
        cell, prefix = None, cell_id
    if record is not None and record.fingerprint.emulated:
        prefix += " (emulated)"
    failing = [c for c in comparisons if not c.ok]
    if not failing:
        worst = max(comparisons, key=lambda c: c.tolerance_used, default=None)
        tail = f" (closest: {worst.quantity} at {worst.tolerance_used:.0%} of tolerance)" if worst else ""
        parts = [f"all {len(comparisons)} quantities within tolerance{tail}"]
    else:
        parts = _failures(failing, buffers)
        cause = _per_rank_statistics(failing, buffers, cell, first_loss_moved)
        if cause:
            parts.append(cause)
    if record is not None:
        parts.extend(_scale_story(record))
    return f"{prefix}: " + "; ".join(parts)


PER_RANK_STATISTICS = (
    "likely cause: per-rank batch statistics (a buffer computed from each rank's share of the batch, "
    "e.g. BatchNorm without sync_batchnorm, differs from the single-process golden's full-batch one)"
)


def _per_rank_statistics(failing: list[Comparison], buffers: frozenset[str], cell: Cell | None,
                         first_loss_moved: bool) -> str:
    """A step-0 loss divergence together with a buffer out of tolerance, on several processes:
    the forward pass already differs before any weight was updated, and what differs is state the
    forward computes from the batch (running statistics), not the weights. (In bf16 the step-0
    difference may hide inside the tolerance, hence `first_loss_moved`.)"""
    if cell is None or cell.processes < 2:
        return ""
    loss_at_start = first_loss_moved or any(
        c.quantity == "losses" and c.first_divergence == "step 0" for c in failing)
    # A buffer in another dtype (a model cast to half, buffers and all) says nothing of how its
    # values were computed: only a buffer whose values moved points at per-rank statistics.
    buffer_off = any(_is_buffer(c.quantity, buffers) and c.first_divergence != "dtype" for c in failing)
    return PER_RANK_STATISTICS if loss_at_start and buffer_off else ""


def _is_buffer(quantity: str, buffers: frozenset[str]) -> bool:
    prefix, _, name = quantity.partition("/")
    return prefix == "state_dict" and name in buffers


def _failures(failing: list[Comparison], buffers: frozenset[str] = frozenset()) -> list[str]:
    parts: list[str] = []
    by_kind: dict[str, list[Comparison]] = {}
    for c in failing:
        kind = c.quantity.split("/")[0]
        if kind == "state_dict":  # the model's buffers (running statistics) apart from its weights
            kind = "buffers" if _is_buffer(c.quantity, buffers) else "weights"
        by_kind.setdefault(kind, []).append(c)
    for c in by_kind.get("losses", []) + by_kind.get("lrs", []):
        what = "loss" if c.quantity == "losses" else "learning rate"
        parts.append(f"{what} leaves tolerance at {c.first_divergence} ({_size(c)})" + _note(c))
    for c in by_kind.get("skipped_steps", []):
        parts.append(f"skipped steps differ from the golden's ({c.note})")
    for kind, label in (("weights", "final weights"), ("buffers", "final buffers"), ("eval", "eval outputs")):
        group = sorted(by_kind.get(kind, []), key=lambda c: -c.tolerance_used)
        if group:
            head = group[0]
            more = f" and {len(group) - 1} more" if len(group) > 1 else ""
            name = head.quantity.split("/", 1)[1]
            where = f" at {head.first_divergence}" if head.first_divergence else ""
            parts.append(f"{label} `{name}`{more} out of tolerance{where} ({_size(head)})" + _note(head))
    return parts


def _size(c: Comparison) -> str:
    if math.isinf(c.tolerance_used):
        return "not comparable"
    return f"max |diff| {c.max_abs_diff:.3g}, {c.tolerance_used:.3g}x tolerance"


def _note(c: Comparison) -> str:
    return f", {c.note}" if c.note else ""


def _scale_story(record: Record) -> list[str]:
    """Overflow skips and loss-scale drops, in optimizer steps (scales are logged after each
    step, so a drop at step 0 is known only through the skip)."""
    scales, skipped = record.loss_scales, record.skipped_steps
    parts = []
    if skipped:
        parts.append(f"steps skipped on overflow: {', '.join(str(i) for i in skipped)}")
    lowered = [i for i in range(1, len(scales)) if scales[i] < scales[i - 1]]
    if lowered:
        verb = "halved" if all(scales[i] * 2 == scales[i - 1] for i in lowered) else "lowered"
        parts.append(f"loss scale {verb} at steps {', '.join(str(i) for i in lowered)}")
    return parts
