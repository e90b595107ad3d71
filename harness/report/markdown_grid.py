"""report.md's grid of tasks x configurations, narrow enough for a CI job summary.

Two things keep it on a screen: columns in which every cell was skipped for one cause fold into
one labelled column (harness/report/grid_folds.py: the 24 CUDA columns of a CPU machine), and a
column's header stacks its parts ("cpu2<br>zero3<br>bf16"), so a column is as wide as "zero3",
not as "cpu2-zero3-bf16" (a fold's label too: "cuda1,<br>cuda2"). The full grid follows in a
collapsed <details>.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from harness.report.grid import Grid
from harness.report.grid_folds import Fold, fold
from harness.report.summary import SYMBOL
from harness.truth.outcome import CellResult, Status

WRAP = 100  # prose lines wrap here; markdown joins a list item's lines again


def column_header(column: str) -> str:
    """'cpu2-zero3-bf16' -> 'cpu2<br>zero3<br>bf16': stacked, one part per line."""
    return "<br>".join(column.split("-"))


def _table(grid: Grid, columns: Sequence[str], folds: Sequence[Fold]) -> list[str]:
    heads = [*grid.row_headers, *(column_header(c) for c in columns),
             *(f.label.replace(", ", ",<br>") for f in folds)]  # stacked too: "cuda1,<br>cuda2"
    lines = ["| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
    skipped = SYMBOL[Status.SKIPPED]
    for key in grid.rows:
        row = [SYMBOL[Status(r.status)] if r else "" for r in (grid.cells.get((key, c)) for c in columns)]
        row += [skipped if any((key, c) in grid.cells for c in f.columns) else "" for f in folds]
        lines.append(f"| {' | '.join(key)} | " + " | ".join(row) + " |")
    return lines


def grid_markdown(results: Sequence[CellResult], by_environment: bool = False) -> list[str]:
    """The count line, the legend, the grid (folded where it can be), the full grid collapsed."""
    folded = fold(Grid.of(results, by_environment=by_environment))
    grid = folded.grid
    noun = "rows (environment, task)" if by_environment else "tasks"
    legend = ", ".join(f"{SYMBOL[s]} {s.value}" for s in Status)
    counts = f"{len(grid.rows)} {noun} x {len(grid.columns)} configurations"
    lines = ["### Grid", "", f"{counts}. Legend: {legend}", "", *_table(grid, folded.shown, folded.folds), ""]
    if not folded.folds:
        return lines
    hidden = len(grid.columns) - len(folded.shown)
    lines += [f"Folded: {hidden} configurations in which every cell was skipped for one cause:", ""]
    for f in folded.folds:  # wrapped: a reason can be long (deepspeed's names its install command)
        item = f"- **{f.label}** ({len(f.columns)} configurations): {f.cells} cells skipped, {f.kind}"
        lines += textwrap.wrap(item, WRAP, subsequent_indent="  ", break_long_words=False,
                               break_on_hyphens=False)
    lines.append("")
    lines += [f"<details><summary>Full grid: all {len(grid.columns)} configurations</summary>", "",
              *_table(grid, grid.columns, ()), "", "</details>", ""]
    return lines
