"""report.html: one self-contained page (inline CSS and SVG, no JavaScript).

Top: the headline and the near misses (passed cells at 80% or more of a tolerance,
harness/report/near_miss.py), then the matrix as a grid of tasks x configurations, each square
coloured by status and linking to that cell below; columns in which every cell was skipped for
one cause fold into one labelled column, the full grid collapsed below it (html_grid.py). Then
the cells in the order a reader wants them:

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

from collections.abc import Sequence
from html import escape
from typing import Any

from harness.judge.outcome import CellResult, Status
from harness.report.html_grid import grid_html, resume_grids_html
from harness.report.html_parts import (
    COLOUR,
    CSS,
    EMULATED_BADGE,
    Anchor,
    anchor,
    badge,
    merged_anchor,
)
from harness.report.merged_report import CrossCheck, MergedReport
from harness.report.near_miss import NEAR_MISS_SHARE, count_text, near_misses, rule_text
from harness.report.summary import by_severity, headline, margin, margin_text, ok, tolerance_share, unexpected
from harness.report.svg import loss_curve_svg
from harness.report.text import DETAIL_TAIL_CHARS, comparison_line

# Cells whose curve is drawn: those where the curve explains something.
CURVE_STATUSES = (Status.FAILED, Status.XPASSED, Status.XFAILED, Status.CRASHED, Status.TIMEOUT)


def _env_label(result: CellResult, show_env: bool) -> str:
    return f' <small class="env">in <code>{escape(result.environment)}</code></small>' if show_env else ""


def _diagnosis(result: CellResult, anchor_of: Anchor, show_env: bool) -> str:
    status = Status(result.status)
    parts = [
        f'<section id="{escape(anchor_of(result))}"><h3><code>{escape(result.id)}</code>'
        f"{_env_label(result, show_env)} {badge(status)}"
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
        colour = "#c62828" if used >= NEAR_MISS_SHARE * 100 else "#f9a825" if used >= 50 else "#2e7d32"
        bar = f'<span class="bar"><span style="width:{used:.0f}%;background:{colour}"></span></span>'
        items = "".join(f"<li><code>{escape(comparison_line(c))}</code></li>" for c in result.comparisons)
        count = len(result.comparisons)
        listing = f"<details><summary>{count}</summary><ul>{items}</ul></details>" if items else ""
        emulated = EMULATED_BADGE if result.emulated else ""
        rows.append(
            f'<tr id="{escape(anchor_of(result))}"><td><code>{escape(result.id)}</code>'
            f"{_env_label(result, show_env)}{emulated}</td>"
            f'<td class="margin">{bar}{escape(margin_text(result))}</td>'
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


def _near_misses(results: Sequence[CellResult], anchor_of: Anchor, show_env: bool) -> str:
    """The near misses, right under the headline (where a reader looks first), closest first;
    each links to its row of the Passed table."""
    misses = near_misses(results)
    if not misses:
        return f'<p id="near-misses">No near miss: no cell {rule_text()}.</p>'
    items = "".join(
        f'<li><a href="#{escape(anchor_of(m.result))}"><code>{escape(m.id)}</code></a>'
        f"{_env_label(m.result, show_env)}: {escape(m.text)}</li>"
        for m in misses
    )
    return (f'<div class="near" id="near-misses"><b>{count_text(misses)}</b>, {rule_text()}: the next '
            f"flake, or the next bug a looser tolerance would hide.<ul>{items}</ul></div>")


def _summary(results: Sequence[CellResult], verdict: str, anchor_of: Anchor, show_env: bool) -> str:
    """The headline with the verdict and the near-miss count, then the near misses."""
    misses = near_misses(results)
    near = f"; <b>{count_text(misses)}</b>" if misses else ""
    return f"<p>{escape(headline(results))}: {verdict}{near}</p>{_near_misses(results, anchor_of, show_env)}"


def render_html(results: Sequence[CellResult], environment: dict[str, Any]) -> str:
    env_name = str(environment.get("name", "?"))
    verdict = (
        '<b class="ok">no cell failed unexpectedly</b>'
        if ok(results)
        else ('<b class="bad">some cells failed unexpectedly</b>')
    )
    body = (
        f'<h1 id="top">Matrix report: <code>{escape(env_name)}</code></h1>'
        f"{_summary(results, verdict, anchor, show_env=False)}"
        f"{grid_html(results, anchor, by_environment=False)}"
        f"{resume_grids_html(results, anchor)}"
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
        f"{_summary(results, verdict, merged_anchor, show_env=True)}"
        f"{grid_html(results, merged_anchor, by_environment=True)}"
        f"<details><summary>Environments</summary>{_environments_table(merged)}</details>"
        + _cells(by_severity(results), merged_anchor, show_env=True, after_failures=cross)
    )
    return _page(f"Matrix report: {merged.name}", body)
