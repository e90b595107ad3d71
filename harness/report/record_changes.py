"""report.md's list of the cells whose numbers changed against another environment
(`--compare-records`; the summary itself: harness/truth/record_changes.py)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.truth.outcome import CellResult
from harness.truth.record_changes import record_changes_summary, summary_line


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
