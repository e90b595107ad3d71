"""The cross-version part of `--compare-records`, summed up: per cell, how its numbers changed
against the other environment's record (harness/judge/version_diff.py), counted for report.json
("record_changes"), the terminal and the version table (report.md lists them:
harness/report/record_changes.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.judge.outcome import CellResult

CHANGES = ("bit-identical", "within tolerance", "diverged", "not compared")


def _changes(results: Sequence[CellResult]) -> list[tuple[CellResult, dict[str, Any]]]:
    return [(r, r.extra["record_change"]) for r in results if isinstance(r.extra.get("record_change"), dict)]


def record_changes_summary(results: Sequence[CellResult]) -> dict[str, Any] | None:
    """{"against": env, "counts": {change: n}, "changed": [{"id", "change", "max_abs_diff",
    "first_difference"}]} (cells not bit-identical), or None when no record was compared."""
    found = _changes(results)
    if not found:
        return None
    counts = {change: sum(c["change"] == change for _, c in found) for change in CHANGES}
    against = sorted({str(c.get("against", "")) for _, c in found})
    changed = [{"id": r.id, "change": c["change"], "max_abs_diff": c.get("max_abs_diff"),
                "first_difference": c.get("first_difference")}
               for r, c in found if c["change"] != "bit-identical"]
    return {"against": ", ".join(against), "counts": counts, "changed": changed}


def summary_line(summary: dict[str, Any]) -> str:
    counts = summary["counts"]
    return (f"numbers against {summary['against']}: " + ", ".join(f"{counts[c]} {c}" for c in CHANGES
                                                                    if counts[c] or c != "not compared"))
