"""report.html: one self-contained page (inline CSS and SVG, no JavaScript).

Top: the matrix as a grid of tasks x configurations, each square coloured by status and
linking to that cell below. Then the cells in the order a reader wants them:

1. Failed: the unexpected results (crashed, timeout, error, failed, xpassed), worst first, each
   with its diagnosis and, where losses were recorded, its loss curve against the golden (from
   CellResult.extra["losses"] / extra["golden_losses"]);
2. Passed: one row per cell with its margin (the largest share of tolerance any of its
   comparisons used), the closest to failing first;
3. Expected failures (xfailed), each with its diagnosis;
4. Skipped: folded, one line per distinct reason with its count, the cell ids in a collapsed
   <details> (no per-cell block: 120 "needs 2 CUDA devices" blocks say nothing 120 times).

A merged report (`render_merged_html`) has one grid row per (environment, task) and, after the
failures, the cross-environment comparison of records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from typing import Any

from harness.report.grid import Grid
from harness.report.merged import CrossCheck, MergedReport
from harness.report.resume_grid import ResumeGrid
from harness.report.summary import by_severity, headline, margin, ok, tolerance_share, unexpected
from harness.report.svg import loss_curve_svg
from harness.report.text import DETAIL_TAIL_CHARS, comparison_line, percent
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

SMALLEST_SHARE = 1e-4  # a margin below 0.01% of the tolerance is shown as "<0.01%"
EMULATED_BADGE = ' <span class="badge" style="background:#455a64">emulated fp16</span>'

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ddd;padding:3px 6px;font-size:12px}
th{text-align:left}
th.col{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;font-family:monospace}
td.sq{width:22px;height:22px;padding:0}
td.sq a{display:block;width:100%;height:100%;text-decoration:none}
.badge{color:#fff;border-radius:3px;padding:1px 6px;font-size:12px}
pre{background:#f5f5f5;padding:.6em;overflow-x:auto;font-size:11px;max-height:24em}
section{border-top:1px solid #ddd;padding:.4em 0}
.ok{color:#2e7d32}.bad{color:#c62828}
.bar{display:inline-block;width:80px;height:8px;background:#eee;margin-right:6px;vertical-align:middle}
.bar span{display:block;height:100%}
details.skip{margin:.25em 0}
ul.ids{columns:3;font-size:12px}
small.env{color:#555}
"""


def anchor(result: CellResult) -> str:
    """The element id of a cell in a one-environment report (a cell id is unique there)."""
    return "cell-" + result.id


def merged_anchor(result: CellResult) -> str:
    """The element id of a cell in a merged report, where one cell id occurs once per environment."""
    return f"cell-{result.environment}.{result.id}"


Anchor = Callable[[CellResult], str]


def _badge(status: Status) -> str:
    return f'<span class="badge" style="background:{COLOUR[status]}">{status.value}</span>'


def _margin_text(result: CellResult) -> str:
    worst = margin(result)
    if worst is None:
        return "no comparison"
    used = tolerance_share(worst)
    if 0 < used < SMALLEST_SHARE:  # 1.9e-05% reads as noise: say how small it is
        return f"<{SMALLEST_SHARE * 100:g}% of tolerance"
    return f"{percent(worst.tolerance_used)} of tolerance"


def _grid(results: Sequence[CellResult], anchor_of: Anchor, by_environment: bool) -> str:
    grid = Grid.of(results, by_environment=by_environment)
    head = "".join(f'<th class="col">{escape(c)}</th>' for c in grid.columns)
    rows = ["<tr>" + "".join(f"<th>{h}</th>" for h in grid.row_headers) + f"{head}</tr>"]
    for index, key in enumerate(grid.rows):
        labels = []
        if by_environment:  # one header spanning the environment's rows (inputs come one by one)
            env = key[0]
            if index == 0 or grid.rows[index - 1][0] != env:
                span = sum(1 for k in grid.rows[index:] if k[0] == env)
                labels.append(f'<th rowspan="{span}"><code>{escape(env)}</code></th>')
        labels.append(f"<th>{escape(key[-1])}</th>")
        squares = []
        for result in grid.row(key):
            if result is None:
                squares.append('<td class="sq" style="background:#fff"></td>')
                continue
            status = Status(result.status)
            note = _margin_text(result) if status is Status.PASSED else result.reason
            where = f" in {result.environment}" if by_environment else ""
            tip = escape(f"{result.id}{where}: {status.value}. {note}", quote=True)
            squares.append(
                f'<td class="sq" style="background:{COLOUR[status]}" title="{tip}">'
                f'<a href="#{escape(anchor_of(result))}" aria-label="{tip}"></a></td>'
            )
        rows.append(f"<tr>{''.join(labels)}{''.join(squares)}</tr>")
    legend = " ".join(_badge(s) for s in Status)
    return f"<p>{legend}</p><table>{''.join(rows)}</table>"


def _resume_grids(results: Sequence[CellResult], anchor_of: Anchor) -> str:
    """One from x to grid per task and precision: saved by the row, resumed by the column."""
    parts = []
    for grid in ResumeGrid.all_of(results):
        head = "".join(f'<th class="col">{escape(d)}</th>' for d in grid.destinations)
        rows = [f"<tr><th>saved by (row), resumed by (column)</th>{head}</tr>"]
        for source in grid.sources:
            squares = []
            for destination in grid.destinations:
                result = grid.at(source, destination)
                if result is None:
                    squares.append('<td class="sq" style="background:#fff"></td>')
                    continue
                status = Status(result.status)
                note = _margin_text(result) if status is Status.PASSED else result.reason
                tip = escape(f"{result.id}: {status.value}. {note}", quote=True)
                squares.append(f'<td class="sq" style="background:{COLOUR[status]}" title="{tip}">'
                               f'<a href="#{escape(anchor_of(result))}" aria-label="{tip}"></a></td>')
            rows.append(f"<tr><th><code>{escape(source)}</code></th>{''.join(squares)}</tr>")
        parts.append(f'<h3 id="resume-{escape(grid.task)}-{escape(grid.precision)}">Resume: '
                     f"<code>{escape(grid.task)}</code> {escape(grid.precision)}, saved after optimizer step "
                     f"{grid.step}</h3><table>{''.join(rows)}</table>")
    return f'<h2 id="resume">Resume cells (saved by x resumed by)</h2>{"".join(parts)}' if parts else ""


def _env_label(result: CellResult, show_env: bool) -> str:
    return f' <small class="env">in <code>{escape(result.environment)}</code></small>' if show_env else ""


def _diagnosis(result: CellResult, anchor_of: Anchor, show_env: bool) -> str:
    status = Status(result.status)
    parts = [
        f'<section id="{escape(anchor_of(result))}"><h3><code>{escape(result.id)}</code>'
        f"{_env_label(result, show_env)} {_badge(status)}"
        + (EMULATED_BADGE if result.emulated else "")
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


def _passed(results: Sequence[CellResult], anchor_of: Anchor, show_env: bool) -> str:
    """One row per passed cell, the one closest to its tolerance first."""

    def share(result: CellResult) -> float:
        worst = margin(result)
        return tolerance_share(worst) if worst is not None else -1.0

    rows = ["<tr><th>cell</th><th>margin</th><th>closest quantity</th><th>time</th><th>comparisons</th></tr>"]
    for result in sorted(results, key=share, reverse=True):  # stable: the run's order within a tie
        worst = margin(result)
        used = min(max(share(result), 0.0), 1.0) * 100
        colour = "#c62828" if used >= 80 else "#f9a825" if used >= 50 else "#2e7d32"
        bar = f'<span class="bar"><span style="width:{used:.0f}%;background:{colour}"></span></span>'
        items = "".join(f"<li><code>{escape(comparison_line(c))}</code></li>" for c in result.comparisons)
        count = len(result.comparisons)
        listing = f"<details><summary>{count}</summary><ul>{items}</ul></details>" if items else ""
        emulated = EMULATED_BADGE if result.emulated else ""
        rows.append(
            f'<tr id="{escape(anchor_of(result))}"><td><code>{escape(result.id)}</code>'
            f"{_env_label(result, show_env)}{emulated}</td>"
            f'<td class="margin">{bar}{escape(_margin_text(result))}</td>'
            f"<td>{escape(worst.quantity) if worst else ''}</td><td>{result.duration_s:.2f} s</td>"
            f"<td>{listing}</td></tr>"
        )
    return f"<table>{''.join(rows)}</table>"


def _skipped(results: Sequence[CellResult], anchor_of: Anchor, show_env: bool) -> str:
    """One collapsed line per distinct reason, the most frequent first, with its cells' ids."""
    groups: dict[str, list[CellResult]] = {}
    for result in results:
        groups.setdefault(result.reason or "(no reason given)", []).append(result)
    lines = []
    for reason, members in sorted(groups.items(), key=lambda item: -len(item[1])):
        ids = "".join(
            f'<li id="{escape(anchor_of(r))}"><code>{escape(r.id)}</code>{_env_label(r, show_env)}</li>'
            for r in members
        )
        lines.append(
            f'<details class="skip"><summary><b>{len(members)}</b> skipped: {escape(reason)}</summary>'
            f'<ul class="ids">{ids}</ul></details>'
        )
    return "".join(lines)


def _cells(results: Sequence[CellResult], anchor_of: Anchor, show_env: bool, after_failures: str = "") -> str:
    """The sections below the grid: failed, [after_failures], passed, expected failures, skipped."""
    of = {status: [r for r in results if Status(r.status) is status] for status in Status}
    problems = unexpected(results)
    parts = []
    if problems:
        parts.append(f'<h2 id="failed">Failed ({len(problems)})</h2>')
        parts += [_diagnosis(r, anchor_of, show_env) for r in problems]
    parts.append(after_failures)
    if of[Status.PASSED]:
        count = len(of[Status.PASSED])
        parts.append(f'<h2 id="passed">Passed ({count}), closest to its tolerance first</h2>')
        parts.append(_passed(of[Status.PASSED], anchor_of, show_env))
    if of[Status.XFAILED]:
        parts.append(f'<h2 id="xfailed">Expected failures ({len(of[Status.XFAILED])})</h2>')
        parts += [_diagnosis(r, anchor_of, show_env) for r in of[Status.XFAILED]]
    if of[Status.SKIPPED]:
        parts.append(f'<h2 id="skipped">Skipped ({len(of[Status.SKIPPED])})</h2>')
        parts.append(_skipped(of[Status.SKIPPED], anchor_of, show_env))
    return "".join(parts)


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>{body}</body></html>\n"
    )


def _environment_rows(environment: dict[str, Any]) -> str:
    return "".join(
        f"<tr><th>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>"
        for k, v in environment.items()
        if k not in ("python_executable",)
    )


def render_html(results: Sequence[CellResult], environment: dict[str, Any]) -> str:
    env_name = str(environment.get("name", "?"))
    verdict = (
        '<b class="ok">no cell failed unexpectedly</b>'
        if ok(results)
        else ('<b class="bad">some cells failed unexpectedly</b>')
    )
    body = (
        f'<h1 id="top">Matrix report: <code>{escape(env_name)}</code></h1>'
        f"<p>{escape(headline(results))}: {verdict}</p>"
        f"{_grid(results, anchor, by_environment=False)}"
        f"{_resume_grids(results, anchor)}"
        f"<details><summary>Environment</summary><table>{_environment_rows(environment)}</table></details>"
        + _cells(by_severity(results), anchor, show_env=False)
    )
    return _page(f"Matrix report: {env_name}", body)


def _environments_table(merged: MergedReport) -> str:
    keys: list[str] = []
    for report in merged.inputs:
        keys += [k for k in report.environment if k not in keys and k != "python_executable"]
    head = "<tr><th></th>" + "".join(f"<th><code>{escape(n)}</code></th>" for n in merged.names) + "</tr>"
    rows = [
        f"<tr><th>{escape(k)}</th>"
        + "".join(f"<td>{escape(str(r.environment.get(k, '')))}</td>" for r in merged.inputs)
        + "</tr>"
        for k in keys
    ]
    return f"<table>{head}{''.join(rows)}</table>"


def _cross(checks: Sequence[CrossCheck], results: Sequence[CellResult]) -> str:
    """The cross-environment comparison: differing records first."""
    ids = {(r.environment, r.id) for r in results}
    identical = sum(c.identical for c in checks)
    title = (
        f'<h2 id="cross-environment">Cross-environment comparison ({identical} bit-identical, '
        f"{len(checks) - identical} differ)</h2>"
    )
    if not checks:
        return title + "<p>No non-DeepSpeed cell has records in two environments to compare.</p>"
    rows = ["<tr><th>cell</th><th>environments</th><th>verdict</th><th>what</th></tr>"]
    for check in sorted(checks, key=lambda c: c.identical):  # differing first, input order kept
        colour = COLOUR[Status.PASSED] if check.identical else COLOUR[Status.FAILED]
        cell = f"<code>{escape(check.cell_id)}</code>"
        if (check.other, check.cell_id) in ids:
            cell = f'<a href="#{escape(f"cell-{check.other}.{check.cell_id}")}">{cell}</a>'
        rows.append(
            f"<tr><td>{cell}</td><td><code>{escape(check.baseline)}</code> vs "
            f"<code>{escape(check.other)}</code></td>"
            f'<td><span class="badge" style="background:{colour}">{check.verdict}</span></td>'
            f"<td>{escape(check.note)}</td></tr>"
        )
    return title + f"<table>{''.join(rows)}</table>"


def render_merged_html(merged: MergedReport) -> str:
    results = merged.results
    verdict = f'<b class="{"ok" if merged.ok else "bad"}">{escape(merged.verdict)}</b>'
    names = " + ".join(f"<code>{escape(n)}</code>" for n in merged.names)
    cross = _cross(merged.cross, results)
    body = (
        f'<h1 id="top">Matrix report: {names}</h1>'
        f"<p>{escape(headline(results))}: {verdict}</p>"
        f"{_grid(results, merged_anchor, by_environment=True)}"
        f"<details><summary>Environments</summary>{_environments_table(merged)}</details>"
        + _cells(by_severity(results), merged_anchor, show_env=True, after_failures=cross)
    )
    return _page(f"Matrix report: {merged.name}", body)
