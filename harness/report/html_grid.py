"""report.html's grids: the matrix (tasks x configurations) and the resume grids (saved by x
resumed by).

The matrix grid shows the columns that say something; those in which every cell was skipped for
one cause fold into one labelled column (harness/report/grid_folds.py) whose single cell spans
every row and links to the Skipped section. The full grid follows in a collapsed <details>.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from harness.judge.outcome import CellResult, Status
from harness.report.grid import Grid
from harness.report.grid_folds import Fold, fold
from harness.report.html_parts import Anchor, badge, square
from harness.report.resume_grid import ResumeGrid


def _row_labels(grid: Grid, index: int, by_environment: bool) -> str:
    key = grid.rows[index]
    labels = []
    if by_environment:  # one header spanning the environment's rows (inputs come one by one)
        env = key[0]
        if index == 0 or grid.rows[index - 1][0] != env:
            span = sum(1 for k in grid.rows[index:] if k[0] == env)
            labels.append(f'<th rowspan="{span}"><code>{escape(env)}</code></th>')
    labels.append(f"<th>{escape(key[-1])}</th>")
    return "".join(labels)


def _fold_cell(folded: Fold, rows: int) -> str:
    tip = escape(folded.text, quote=True)
    return (f'<td class="fold" rowspan="{rows}" title="{tip}"><a href="#skipped">'
            f"<b>{folded.cells}</b> cells skipped:<br>{escape(folded.kind)}</a></td>")


def _table(grid: Grid, columns: Sequence[str], folds: Sequence[Fold], anchor_of: Anchor,
           by_environment: bool) -> str:
    head = "".join(f'<th class="col">{escape(c)}</th>' for c in columns)
    head += "".join(  # one name a line: "cpu2-zero1, cpu2-zero2, cpu2-zero3" is a tall header
        f'<th class="col" title="{escape(f.text, quote=True)}">'
        + "<br>".join(escape(name) for name in f.label.split(", ")) + "</th>"
        for f in folds
    )
    rows = ["<tr>" + "".join(f"<th>{h}</th>" for h in grid.row_headers) + f"{head}</tr>"]
    for index, key in enumerate(grid.rows):
        where = f" in {key[0]}" if by_environment else ""
        squares = "".join(square(grid.cells.get((key, c)), anchor_of, where) for c in columns)
        if index == 0:
            squares += "".join(_fold_cell(f, len(grid.rows)) for f in folds)
        rows.append(f"<tr>{_row_labels(grid, index, by_environment)}{squares}</tr>")
    return f"<table>{''.join(rows)}</table>"


def grid_html(results: Sequence[CellResult], anchor_of: Anchor, by_environment: bool) -> str:
    """The count line, the legend, the grid (folded where it can be), the full grid collapsed."""
    folded = fold(Grid.of(results, by_environment=by_environment))
    grid = folded.grid
    noun = "rows (environment, task)" if by_environment else "tasks"
    counts = f"{len(grid.rows)} {noun} x {len(grid.columns)} configurations"
    if folded.folds:
        hidden = len(grid.columns) - len(folded.shown)
        counts += (f"; {hidden} configurations in which every cell was skipped for one cause are "
                   f"folded into {len(folded.folds)} column{'s' if len(folded.folds) > 1 else ''}: "
                   + "; ".join(escape(f.text) for f in folded.folds))
    legend = " ".join(badge(s) for s in Status)
    parts = [f"<p>{counts}.</p><p>{legend}</p>",
             _table(grid, folded.shown, folded.folds, anchor_of, by_environment)]
    if folded.folds:
        full = _table(grid, grid.columns, (), anchor_of, by_environment)
        parts.append(f'<details class="grid"><summary>Full grid: all {len(grid.columns)} '
                     f"configurations</summary>{full}</details>")
    return "".join(parts)


def resume_grids_html(results: Sequence[CellResult], anchor_of: Anchor) -> str:
    """One from x to grid per task and precision: saved by the row, resumed by the column."""
    parts = []
    for grid in ResumeGrid.all_of(results):
        head = "".join(f'<th class="col">{escape(d)}</th>' for d in grid.destinations)
        rows = [f"<tr><th>saved by (row), resumed by (column)</th>{head}</tr>"]
        for source in grid.sources:
            squares = "".join(square(grid.at(source, d), anchor_of) for d in grid.destinations)
            rows.append(f"<tr><th><code>{escape(source)}</code></th>{squares}</tr>")
        parts.append(f'<h3 id="resume-{escape(grid.task)}-{escape(grid.precision)}">Resume: '
                     f"<code>{escape(grid.task)}</code> {escape(grid.precision)}, saved after optimizer step "
                     f"{grid.step}</h3><table>{''.join(rows)}</table>")
    return f'<h2 id="resume">Resume cells (saved by x resumed by)</h2>{"".join(parts)}' if parts else ""

