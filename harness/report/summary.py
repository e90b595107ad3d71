"""Counting and ordering results: shared by every report format so they always agree."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from harness.judge.outcome import CellResult, Comparison, Status
from harness.report.text import percent

SMALLEST_SHARE = 1e-4  # a margin below 0.01% of the tolerance is shown as "<0.01%"

# Worst first: the order problems are listed in every report.
SEVERITY = (
    Status.CRASHED,
    Status.TIMEOUT,
    Status.ERROR,
    Status.FAILED,
    Status.XPASSED,
    Status.XFAILED,
    Status.SKIPPED,
    Status.PASSED,
)

# One symbol per status for plain text and markdown (no colour there).
SYMBOL = {
    Status.PASSED: "✅",
    Status.FAILED: "❌",
    Status.SKIPPED: "⏭️",
    Status.XFAILED: "🟡",
    Status.XPASSED: "❗",
    Status.ERROR: "💥",
    Status.TIMEOUT: "⏱️",
    Status.CRASHED: "☠️",
}


def counts(results: Iterable[CellResult]) -> dict[str, int]:
    """{status: count} with every status present (zeros included), in the Status enum's order."""
    out = {status.value: 0 for status in Status}
    for result in results:
        out[Status(result.status).value] += 1
    return out


def unexpected(results: Iterable[CellResult]) -> list[CellResult]:
    """Cells that make the run fail (failed, xpassed, error, timeout, crashed), worst first."""
    bad = [r for r in results if Status(r.status).is_unexpected_failure]
    return sorted(bad, key=lambda r: SEVERITY.index(Status(r.status)))


def by_severity(results: Sequence[CellResult]) -> list[CellResult]:
    """All cells, worst status first; the run's order is kept within one status."""
    return sorted(results, key=lambda r: SEVERITY.index(Status(r.status)))


def headline(results: Sequence[CellResult]) -> str:
    """One line such as '38 passed, 2 skipped, 1 failed (41 cells)'; zero counts left out."""
    parts = [f"{n} {status}" for status, n in counts(results).items() if n]
    return f"{', '.join(parts) or 'no cells'} ({len(results)} cells)"


def ok(results: Iterable[CellResult]) -> bool:
    """True when no cell failed unexpectedly: the run's exit status."""
    return not unexpected(results)


def tolerance_share(comparison: Comparison) -> float:
    """The comparison's share of its tolerance as a float; one read back from report.json as
    "nan"/"inf" (JSON has no NaN) counts as infinite: unknown is never a comfortable margin."""
    try:
        value = float(comparison.tolerance_used)
    except (TypeError, ValueError):
        return math.inf
    return value if math.isfinite(value) else math.inf


def margin(result: CellResult) -> Comparison | None:
    """The comparison that used the largest share of its tolerance (the cell's margin to failing);
    None for a cell without comparisons. The first such comparison wins a tie."""
    worst: Comparison | None = None
    for comparison in result.comparisons:
        if worst is None or tolerance_share(comparison) > tolerance_share(worst):
            worst = comparison
    return worst


def margin_text(result: CellResult) -> str:
    """A cell's margin in words: "12% of tolerance", "<0.01% of tolerance", "no comparison"."""
    worst = margin(result)
    if worst is None:
        return "no comparison"
    used = tolerance_share(worst)
    if 0 < used < SMALLEST_SHARE:  # 1.9e-05% reads as noise: say how small it is
        return f"<{SMALLEST_SHARE * 100:g}% of tolerance"
    return f"{percent(worst.tolerance_used)} of tolerance"
