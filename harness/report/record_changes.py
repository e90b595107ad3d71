"""The cross-version part of `--compare-records`: per cell, how its numbers changed against the
other environment's record (harness/truth/version_diff.py), summed up for report.json
("record_changes") and listed in report.md and on the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.truth.outcome import CellResult

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


def record_changes_markdown(results: Sequence[CellResult]) -> list[str]:
    summary = record_changes_summary(results)
    if summary is None:
        return []
    lines = ["### Numbers against another environment", "",
             f"{summary_line(summary)} (informative: each cell's verdict is its golden's).", ""]
    if summary["changed"]:
        lines += ["| cell | change | max abs diff | first difference |", "|---|---|---|---|"]
        order = {c: i for i, c in enumerate(("diverged", "not compared", "within tolerance"))}
        for entry in sorted(summary["changed"], key=lambda e: order.get(e["change"], 9)):
            diff = entry["max_abs_diff"]
            diff_text = f"{diff:.3g}" if isinstance(diff, float) else str(diff)
            first = entry["first_difference"] or ""
            lines.append(f"| `{entry['id']}` | {entry['change']} | {diff_text} | {first} |")
        lines.append("")
    return lines
