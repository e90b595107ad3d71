"""report.html: one self-contained page (inline CSS and SVG, no JavaScript).

Top: the matrix as a grid of tasks x configurations, each square coloured by status and
linking to that cell's diagnosis below. Each failing cell's diagnosis has its loss curve
drawn against the golden (from CellResult.extra["losses"] / extra["golden_losses"]).
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from harness.report.grid import Grid
from harness.report.summary import by_severity, headline, ok
from harness.report.svg import loss_curve_svg
from harness.report.text import DETAIL_TAIL_CHARS, comparison_line
from harness.truth.outcome import CellResult, Status

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
# Cells whose curve is drawn: those where the curve explains something.
CURVE_STATUSES = (Status.FAILED, Status.XPASSED, Status.XFAILED, Status.CRASHED, Status.TIMEOUT)

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ddd;padding:3px 6px;font-size:12px}
th.col{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;font-family:monospace}
td.sq{width:22px;height:22px;padding:0}
td.sq a{display:block;width:100%;height:100%;text-decoration:none}
.badge{color:#fff;border-radius:3px;padding:1px 6px;font-size:12px}
pre{background:#f5f5f5;padding:.6em;overflow-x:auto;font-size:11px;max-height:24em}
section{border-top:1px solid #ddd;padding:.4em 0}
.ok{color:#2e7d32}.bad{color:#c62828}
"""


def anchor(result: CellResult) -> str:
    return "cell-" + result.id


def _badge(status: Status) -> str:
    return f'<span class="badge" style="background:{COLOUR[status]}">{status.value}</span>'


def _grid(results: Sequence[CellResult]) -> str:
    grid = Grid.of(results)
    head = "".join(f'<th class="col">{escape(c)}</th>' for c in grid.columns)
    rows = [f"<tr><th>task</th>{head}</tr>"]
    for task in grid.tasks:
        squares = []
        for result in grid.row(task):
            if result is None:
                squares.append('<td class="sq" style="background:#fff"></td>')
                continue
            status = Status(result.status)
            tip = escape(f"{result.id}: {status.value}. {result.reason}", quote=True)
            squares.append(
                f'<td class="sq" style="background:{COLOUR[status]}" title="{tip}">'
                f'<a href="#{escape(anchor(result))}" aria-label="{tip}"></a></td>'
            )
        rows.append(f"<tr><th>{escape(task)}</th>{''.join(squares)}</tr>")
    legend = " ".join(_badge(s) for s in Status)
    return f"<p>{legend}</p><table>{''.join(rows)}</table>"


def _diagnosis(result: CellResult) -> str:
    status = Status(result.status)
    parts = [
        f'<section id="{escape(anchor(result))}"><h3><code>{escape(result.id)}</code> {_badge(status)}'
        + (' <span class="badge" style="background:#455a64">emulated fp16</span>' if result.emulated else "")
        + f"</h3><p>{escape(result.reason) or '&nbsp;'} <small>({result.duration_s:.2f} s)</small></p>"
    ]
    if result.comparisons:
        items = "".join(
            f'<li class="{"ok" if c.ok else "bad"}"><code>{escape(comparison_line(c))}</code></li>'
            for c in sorted(result.comparisons, key=lambda c: c.ok)
        )
        parts.append(f"<ul>{items}</ul>")
    losses, golden = result.extra.get("losses"), result.extra.get("golden_losses")
    if status in CURVE_STATUSES and isinstance(losses, list) and isinstance(golden, list):
        parts.append(loss_curve_svg(losses, golden, title=f"{result.id} losses against the golden"))
    if result.detail:
        parts.append(f"<pre>{escape(result.detail[-DETAIL_TAIL_CHARS:])}</pre>")
    parts.append('<p><a href="#top">back to the grid</a></p></section>')
    return "".join(parts)


def render_html(results: Sequence[CellResult], environment: dict[str, Any]) -> str:
    env_name = escape(str(environment.get("name", "?")))
    env_rows = "".join(
        f"<tr><th>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>"
        for k, v in environment.items()
        if k not in ("python_executable",)
    )
    verdict = (
        '<b class="ok">no cell failed unexpectedly</b>'
        if ok(results)
        else ('<b class="bad">some cells failed unexpectedly</b>')
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Matrix report: {env_name}</title><style>{CSS}</style></head><body>"
        f'<h1 id="top">Matrix report: <code>{env_name}</code></h1>'
        f"<p>{escape(headline(results))}: {verdict}</p>"
        f"{_grid(results)}"
        f"<details><summary>Environment</summary><table>{env_rows}</table></details>"
        "<h2>Cells</h2>" + "".join(_diagnosis(r) for r in by_severity(results)) + "</body></html>\n"
    )
