"""Plain-text diagnosis of one cell: used by junit.xml, the pytest items and the terminal."""

from __future__ import annotations

from harness.outcome import CellResult, Comparison, Status

DETAIL_TAIL_CHARS = 4000  # enough for a traceback or a stack dump's end, small enough to read


def comparison_line(c: Comparison) -> str:
    verdict = "ok  " if c.ok else "FAIL"
    where = f" first diverged at {c.first_divergence}" if c.first_divergence else ""
    note = f" ({c.note})" if c.note else ""
    return (
        f"{verdict} {c.quantity}: max_abs_diff={c.max_abs_diff:.3g} max_rel_diff={c.max_rel_diff:.3g} "
        f"(atol={c.atol:.3g}, rtol={c.rtol:.3g}, {c.tolerance_used:.0%} of tolerance used){where}{note}"
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
