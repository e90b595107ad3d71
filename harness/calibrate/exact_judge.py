"""The exact tier, judged (opt-in: `python -m harness run --exact`): a passing CPU cell of the tier
fails unless every quantity of its record (losses, lrs, loss scales, eval outputs, the state dict)
equals its reduction-order reference bit for bit (harness.calibrate.reduction_order), where the
tolerance would let a bug of up to 1e-5 through.

The tier is the cells whose computation a reference follows (exact_tier.not_modelled) less the
kinds listed in EXCLUDED: their backend sums in an order the reference does not follow, so they
differ from it by an ulp or two with no bug at all. That list is a measurement, not a guess: on an
AMD EPYC with AVX-512, natively, with the measuring process started at one intra-op thread and with
cells and measurement capped at AVX2, the same 128 of 157 passing CPU cells were bit-identical and
exactly these 29 were not; an AVX2-only EPYC gave the same counts per precision, with the same kinds
of cell differing (docs/calibration.md, section 4). On an Intel Xeon with AVX-512 and avx512_fp16
(no AMX) the same held but for `uneven_drop`'s five 2-process fp32 cells, 1-2 ulps off (accumulation
over micro-batches, as `sgd_accum`'s): they were exact on the EPYCs by chance, and are excluded now;
capped at AVX2 there, every 2-process fp32 member's eval logits differed until the reference
evaluated each rank's rows apart (harness/golden/reference.py). `clip_norm` on ZeRO-1/2/3 and FSDP2
was excluded (the clip norm summed per shard: 1-2 fp32 ulps) until the reference took the norm as
each of them does (harness.golden.backend_clipping): all 12 of those cells are bit-identical since.
Opt-in because a member that is exact on every CPU measured so far may still not be on the next one
(AMX has not been measured): `python -m harness calibrate --exact-tier DIR` there says whether it holds.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from harness.calibrate.exact_tier import ExactCheck, not_modelled
from harness.calibrate.reduction_order import differing_quantities, reduction_order_reference
from harness.judge.cell_verdict import golden_task_of
from harness.judge.outcome import CellResult, Comparison, Failure, Status
from harness.plan.cell import CORE, Cell
from harness.plan.selection import keyword_matches
from harness.record.record_format import Record

# The quantity name of an exact-tier comparison: f"{EXACT_PREFIX}{quantity}".
EXACT_PREFIX = "exact:"

# (-k expression over cell ids, why those cells differ from the reference by an ulp or two)
EXCLUDED: tuple[tuple[str, str], ...] = (
    ("classifier and cpu2 and fp32",
     "AdamW over three parameter groups on 2 ranks: 1-2 fp32 ulps (losses 1.2e-7) from the reference"),
    ("sgd_accum and cpu2 and fp32",
     "each rank accumulates its own micro-batches before the ranks average; the reference averages "
     "each global micro-batch's halves first: 1 fp32 ulp (eval logits 6.0e-8)"),
    ("uneven_drop and cpu2 and fp32",
     "each rank accumulates its own micro-batches before the ranks average, as in sgd_accum: 1-2 fp32 "
     "ulps (eval logits up to 6.0e-8) on an Intel Xeon with avx512_fp16, bit-identical on an AMD EPYC"),
    ("batchnorm_sync and cpu2",
     "SyncBatchNorm sums each rank's statistics; the reference takes them over the whole batch at "
     "once: eval logits 4.8e-7 in fp32"),
)


def why_not_in_tier(cell: Cell) -> str:
    """Why `cell` is not judged exactly; empty: it is in the tier."""
    if cell.device != "cpu":
        return "not a CPU cell (the tier was measured with CPU kernels)"
    if cell.implementation != CORE:
        return f"implementation {cell.implementation!r}: the tier was measured on the core"
    why = not_modelled(cell, golden_task_of(cell.task))
    if why:
        return f"not modelled: {why}"
    for expression, reason in EXCLUDED:
        if keyword_matches(cell, expression):
            return reason
    return ""


def exact_comparisons(differing: dict[str, tuple[int, float]]) -> list[Comparison]:
    """One failed comparison (tolerance zero) per quantity that is not bit-identical to the reference."""
    return [
        Comparison(quantity=f"{EXACT_PREFIX}{name}", ok=False, max_abs_diff=largest, max_rel_diff=math.inf,
                   atol=0.0, rtol=0.0, tolerance_used=math.inf,
                   note=f"{elements} element(s) not bit-identical to the reduction-order reference")
        for name, (elements, largest) in differing.items()
    ]


def judge_exactly(result: CellResult, record_dir: Path) -> CellResult:
    """`result` as the exact tier leaves it: a passed cell of the tier whose record differs from its
    reference fails (a divergence, named); every other result is returned as it was, with
    `extra["exact_tier"]` saying what the tier made of it."""
    if result.status != Status.PASSED:
        return result
    why = why_not_in_tier(result.cell)
    if why:
        return replace(result, extra={**result.extra, "exact_tier": f"not judged exactly: {why}"})
    reference = reduction_order_reference(result.cell, golden_task_of(result.cell.task))
    differing = differing_quantities(Record.load(record_dir), reference)
    if not differing:
        return replace(result, extra={**result.extra, "exact_tier": "bit-identical to its reference"})
    name, (elements, largest) = max(differing.items(), key=lambda item: item[1][1])
    count = f"{len(differing)} quantit{'y' if len(differing) == 1 else 'ies'}"
    reason = (f"exact tier: {count} not bit-identical to the reduction-order reference; largest {name} "
              f"({elements} element(s), max |diff| {largest:.2e}): inside the tolerance, not exact")
    return replace(result, status=Status.FAILED, failure=Failure.DIVERGENCE, reason=reason,
                   comparisons=[*result.comparisons, *exact_comparisons(differing)],
                   extra={**result.extra, "exact_tier": "differs from its reference"})


def tier_lines(checks: list[ExactCheck]) -> list[str]:
    """Whether the judged tier holds on this machine, from a measurement (exact_tier.check_exact):
    a member that is not exact here would fail a correct cell under `--exact`; a non-member that
    is exact could join. Printed by `calibrate --exact-tier`."""
    measured = [c for c in checks if c.checked]
    members = [c for c in measured if not why_not_in_tier(Cell.from_id(c.cell_id))]
    broken = [c.cell_id for c in members if not c.exact]
    joinable = [c.cell_id for c in measured if c.exact and c not in members]
    lines = [f"judged tier (run --exact): {len(members) - len(broken)} of its {len(members)} measured "
             f"members bit-identical here"
             + ("" if not broken else f"; NOT exact here, so --exact would fail them: {', '.join(broken)}")]
    if joinable:
        lines.append(f"exact here but outside the tier: {', '.join(joinable)}")
    return lines
