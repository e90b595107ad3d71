"""Plain-text diagnosis of one cell: used by junit.xml, the pytest items and the terminal."""

from __future__ import annotations

from harness.truth.outcome import CellResult, Comparison, Status

DETAIL_TAIL_CHARS = 4000  # enough for a traceback or a stack dump's end, small enough to read


def _num(value: object, spec: str = ".3g") -> str:
    """Format a number; a value read back from report.json may be "nan" (JSON has no NaN)."""
    try:
        return format(float(value), spec)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)


def percent(value: object) -> str:
    """Two significant digits below 100% (0.31% must not print as 0%), whole numbers above."""
    try:
        share = float(value) * 100  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    return f"{share:.0f}%" if share >= 100 else f"{share:.2g}%"


def comparison_line(c: Comparison) -> str:
    verdict = "ok  " if c.ok else "FAIL"
    where = f" first diverged at {c.first_divergence}" if c.first_divergence else ""
    note = f" ({c.note})" if c.note else ""
    # Two significant digits: 0.3% of the bound must not print as "0%".
    used = f", {percent(c.tolerance_used)} of tolerance used" if c.tolerance_used else ""
    return (
        f"{verdict} {c.quantity}: max_abs_diff={_num(c.max_abs_diff)} max_rel_diff={_num(c.max_rel_diff)} "
        f"(atol={_num(c.atol)}, rtol={_num(c.rtol)}{used}){where}{note}"
    )


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
