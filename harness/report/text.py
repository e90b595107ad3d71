"""Plain-text diagnosis of one cell: used by junit.xml, the pytest items and the terminal."""

from __future__ import annotations

import math

from harness.judge.outcome import CellResult, Comparison, Status

DETAIL_TAIL_CHARS = 4000  # enough for a traceback or a stack dump's end, small enough to read


def _num(value: object, spec: str = ".3g") -> str:
    """Format a number; a value read back from report.json may be "nan" (JSON has no NaN)."""
    try:
        return format(float(value), spec)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)


def percent(value: object) -> str:
    """Two significant digits below 10% (0.31% must not print as 0%), whole numbers above: a
    share just under 100% reads "100%", never "1e+02%" (what two significant digits make of it)."""
    try:
        share = float(value) * 100  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    return f"{share:.0f}%" if share >= 9.95 else f"{share:.2g}%"


def _absent(value: object) -> bool:
    """A diff that was never computed: NaN, or "nan" read back from report.json. (A NaN in the
    numbers compared yields an infinite diff, harness/judge/compare.py: NaN here means none.)"""
    try:
        return math.isnan(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True


def comparison_line(c: Comparison) -> str:
    verdict = "ok  " if c.ok else "FAIL"
    where = f" first diverged at {c.first_divergence}" if c.first_divergence else ""
    note = f" ({c.note})" if c.note else ""
    # Two significant digits: 0.3% of the bound must not print as "0%".
    used = f", {percent(c.tolerance_used)} of tolerance used" if c.tolerance_used else ""
    diffs = (
        "no diff computed"  # e.g. no record to compare with: "nan" would read as a NaN result
        if _absent(c.max_abs_diff) and _absent(c.max_rel_diff)
        else f"max_abs_diff={_num(c.max_abs_diff)} max_rel_diff={_num(c.max_rel_diff)}"
    )
    return f"{verdict} {c.quantity}: {diffs} (atol={_num(c.atol)}, rtol={_num(c.rtol)}{used}){where}{note}"


def failure_text(result: CellResult, tail_chars: int = DETAIL_TAIL_CHARS) -> str:
    """The reason, every comparison (failing ones first) and the tail of the detail text."""
    lines = [f"{result.id} [{Status(result.status).value}] {result.reason}".rstrip()]
    if result.emulated:
        lines.append("(ran through the labelled fp16 emulation for DeepSpeed on CPU)")
    comparisons = sorted(result.comparisons, key=lambda c: c.ok)
    if comparisons:
        lines.append("comparisons against the golden:")
        lines.extend("  " + comparison_line(c) for c in comparisons)
    if result.detail:
        detail = result.detail
        if len(detail) > tail_chars:
            detail = f"... ({len(detail) - tail_chars} characters cut)\n" + detail[-tail_chars:]
        lines.append("detail:")
        lines.append(detail)
    return "\n".join(lines)
