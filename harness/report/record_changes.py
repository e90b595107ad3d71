"""report.md's section on how the cells' numbers changed against another environment
(`--compare-records`; the summary itself: harness/judge/record_change_summary.py).

It leads with the counts, then lists only rows that say something: the cells whose numbers moved
(diverged first, then within tolerance). Cells not compared are one line per reason, their ids
folded: in the deepspeed environment compared with nodeepspeed, every ZeRO cell is one (the
other environment cannot run it), and 90 rows of "not compared" with a diff that was never
computed would bury the grid.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence
from typing import Any

from harness.judge.outcome import CellResult
from harness.judge.record_change_summary import record_changes_summary, summary_line

NOT_COMPARED = "not compared"
ORDER = ("diverged", "within tolerance")  # the rows listed, in this order
NO_VALUE = "—"  # a diff never computed (report.json's "nan"): said as absent, not as "nan"
WRAP = 100  # the folded id lists wrap here: markdown joins the lines of a paragraph


def diff_text(value: Any) -> str:
    """A diff as 3 significant digits; NO_VALUE where there is none (NaN, "nan", None)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return NO_VALUE
    return f"{number:.3g}" if not math.isnan(number) else NO_VALUE


def not_compared_reason(change: dict[str, Any]) -> str:
    """Why a cell's record was not compared, in the words a reader acts on. The note is the
    loading error of the other environment's record (harness/judge/version_diff.py)."""
    against = str(change.get("against") or "the other environment")
    note = str(change.get("note") or "")
    if "does not exist" in note:  # the usual case: the cell did not run there (a ZeRO cell in nodeepspeed)
        return f"`{against}` has no record of them (they did not run there, or its records were not kept)"
    # "record <path>: why. Valid: ... Fix: ...": the path is the cell's own, the why is shared.
    why = re.sub(r"^record (tensors )?\S+: ", "", note).split(". Valid:")[0].strip()
    return f"the record of `{against}` cannot be read: {why}" if why else "no reason recorded"


def _not_compared(results: Sequence[CellResult]) -> list[str]:
    groups: dict[str, list[str]] = {}
    for result in results:
        change = result.extra.get("record_change")
        if isinstance(change, dict) and change.get("change") == NOT_COMPARED:
            groups.setdefault(not_compared_reason(change), []).append(result.id)
    lines: list[str] = []
    for reason, ids in sorted(groups.items(), key=lambda item: -len(item[1])):
        listed = textwrap.wrap(", ".join(f"`{i}`" for i in ids), WRAP, break_long_words=False,
                               break_on_hyphens=False)
        summary = reason.replace("`", "")  # <summary> is HTML: no markdown inside
        lines += [f"<details><summary><b>{len(ids)} not compared</b>: {summary}</summary>", "", *listed,
                  "", "</details>", ""]
    return lines


def record_changes_markdown(results: Sequence[CellResult]) -> list[str]:
    summary = record_changes_summary(results)
    if summary is None:
        return []
    lines = ["### Numbers against another environment", "",
             f"{summary_line(summary)} (informative: each cell's verdict is its golden's).", ""]
    moved = [e for e in summary["changed"] if e["change"] in ORDER]
    if moved:
        lines += ["| cell | change | max abs diff | first difference |", "|---|---|---|---|"]
        for entry in sorted(moved, key=lambda e: ORDER.index(e["change"])):
            diff, first = diff_text(entry["max_abs_diff"]), entry["first_difference"] or NO_VALUE
            lines.append(f"| `{entry['id']}` | {entry['change']} | {diff} | {first} |")
        lines.append("")
    return lines + _not_compared(results)
