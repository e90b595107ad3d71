"""The pieces report.html is built of, shared by its page (html.py) and its grids (html_grid.py):
colours, the stylesheet, element ids, badges, a grid square."""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from harness.judge.outcome import CellResult, Status
from harness.report.summary import margin_text

COLOUR = {
    Status.PASSED: "#2e7d32",
    Status.FAILED: "#c62828",
    Status.SKIPPED: "#9e9e9e",
    Status.XFAILED: "#f9a825",
    Status.XPASSED: "#ef6c00",
    Status.ERROR: "#6a1b9a",
    Status.TIMEOUT: "#ad1457",
    Status.CRASHED: "#212121",
}
# Colours used by nothing else on the page: the screenshot test finds the near-miss box and the
# folded grid column by them (tests/harness/report/test_screenshot.py).
NEAR_MISS_BACKGROUND = "#fff8e1"
NEAR_MISS_EDGE = "#bf360c"
FOLD_BACKGROUND = "#eceff1"

EMULATED_BADGE = ' <span class="badge" style="background:#455a64">emulated fp16</span>'

CSS = f"""
body{{font-family:system-ui,sans-serif;margin:1.5em;color:#222}}
table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #ddd;padding:3px 6px;font-size:12px}}
th{{text-align:left}}
th.col{{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;font-family:monospace}}
td.sq{{width:22px;height:22px;padding:0}}
td.sq a{{display:block;width:100%;height:100%;text-decoration:none}}
td.fold{{background:{FOLD_BACKGROUND};width:9em;text-align:center;vertical-align:middle;padding:4px 8px}}
td.fold a{{color:#37474f;text-decoration:none}}
.badge{{color:#fff;border-radius:3px;padding:1px 6px;font-size:12px}}
pre{{background:#f5f5f5;padding:.6em;overflow-x:auto;font-size:11px;max-height:24em}}
section{{border-top:1px solid #ddd;padding:.4em 0}}
.ok{{color:#2e7d32}}.bad{{color:#c62828}}
.near{{background:{NEAR_MISS_BACKGROUND};border-left:6px solid {NEAR_MISS_EDGE}}}
.near{{padding:.3em .8em;margin:.6em 0}}
.near ul{{margin:.2em 0}}
.bar{{display:inline-block;width:80px;height:8px;background:#eee;margin-right:6px;vertical-align:middle}}
.bar span{{display:block;height:100%}}
details.skip,details.grid{{margin:.25em 0}}
ul.ids{{columns:3;font-size:12px}}
small.env{{color:#555}}
"""

Anchor = Callable[[CellResult], str]


def anchor(result: CellResult) -> str:
    """The element id of a cell in a one-environment report (a cell id is unique there)."""
    return "cell-" + result.id


def merged_anchor(result: CellResult) -> str:
    """The element id of a cell in a merged report, where one cell id occurs once per environment."""
    return f"cell-{result.environment}.{result.id}"


def badge(status: Status) -> str:
    return f'<span class="badge" style="background:{COLOUR[status]}">{status.value}</span>'


def square(result: CellResult | None, anchor_of: Anchor, where: str = "") -> str:
    """One grid square: coloured by status, its tooltip the reason (a passed cell's margin),
    linking to the cell's block below. White where the matrix has no such cell."""
    if result is None:
        return '<td class="sq" style="background:#fff"></td>'
    status = Status(result.status)
    note = margin_text(result) if status is Status.PASSED else result.reason
    tip = escape(f"{result.id}{where}: {status.value}. {note}", quote=True)
    return (f'<td class="sq" style="background:{COLOUR[status]}" title="{tip}">'
            f'<a href="#{escape(anchor_of(result))}" aria-label="{tip}"></a></td>')
