"""Counting and ordering results: shared by every report format so they always agree."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from harness.truth.outcome import CellResult, Status

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
