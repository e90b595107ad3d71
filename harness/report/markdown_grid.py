"""report.md's grid of tasks x configurations, narrow enough for a CI job summary.

Two things keep it on a screen: columns in which every cell was skipped for one cause fold into
one labelled column (harness/report/grid_folds.py: the 24 CUDA columns of a CPU machine), and a
column's header stacks its parts ("cpu2<br>zero3<br>bf16"), so a column is as wide as "zero3",
not as "cpu2-zero3-bf16" (a fold's label too: "cuda1,<br>cuda2"). When the columns left standing
are still wider than a job summary's line (SUMMARY_WIDTH: the 18 CPU configurations of single,
DDP, ZeRO 1-3 and fsdp are), the grid is cut into consecutive tables between launch shapes, each
with the task column. The full grid follows in a collapsed <details>.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from harness.judge.outcome import CellResult, Status
from harness.report.grid import Grid
from harness.report.grid_folds import Fold, fold
from harness.report.summary import SYMBOL

WRAP = 100  # prose lines wrap here; markdown joins a list item's lines again
# A table's rendered width, in characters, above which the visible grid is cut between launch
# shapes: what a CI job summary shows on one line (tests/harness/report/test_report_size.py).
SUMMARY_WIDTH = 160
_SYMBOL_WIDTH = 2  # every status symbol is one emoji, drawn two characters wide


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


def _width(header: str) -> int:
    """A column's rendered width: its widest header line or a symbol, plus border and padding."""
    return 3 + max([len(line) for line in header.split("<br>")] + [_SYMBOL_WIDTH])


def _pieces(grid: Grid, columns: Sequence[str], folds: Sequence[Fold]) -> list[tuple[list[str], list[Fold]]]:
    """The columns (and folds, last) cut into runs that each fit SUMMARY_WIDTH with the row
    headers, cut only where the launch shape changes ('cpu2-zero3-*' stays together)."""
    keys = [*grid.rows] or [tuple(grid.row_headers)]
    # "| " opens a row and " |" closes it: 3 characters besides each column's own 3.
    fixed = 3 + sum(3 + max(len(header), *(len(key[i]) for key in keys))
                    for i, header in enumerate(grid.row_headers))
    groups: list[tuple[list[str], list[Fold], int]] = []
    for column in columns:
        shape = column.rsplit("-", 1)[0]
        if groups and groups[-1][0] and groups[-1][0][-1].rsplit("-", 1)[0] == shape:
            groups[-1][0].append(column)
            groups[-1] = (groups[-1][0], groups[-1][1], groups[-1][2] + _width(column_header(column)))
        else:
            groups.append(([column], [], _width(column_header(column))))
    groups += [([], [f], _width(f.label.replace(", ", ",<br>"))) for f in folds]
    pieces: list[tuple[list[str], list[Fold]]] = []
    used = fixed
    for cols, fls, width in groups:
        if not pieces or used + width > SUMMARY_WIDTH:
            pieces.append(([], []))
            used = fixed
        pieces[-1][0].extend(cols)
        pieces[-1][1].extend(fls)
        used += width
    return pieces or [([], [])]


def _tables(grid: Grid, columns: Sequence[str], folds: Sequence[Fold]) -> list[str]:
    lines: list[str] = []
    for i, (cols, fls) in enumerate(_pieces(grid, columns, folds)):
        lines += ([""] if i else []) + _table(grid, cols, fls)
    return lines


def grid_markdown(results: Sequence[CellResult], by_environment: bool = False) -> list[str]:
    """The count line, the legend, the grid (folded where it can be), the full grid collapsed."""
    folded = fold(Grid.of(results, by_environment=by_environment))
    grid = folded.grid
    noun = "rows (environment, task)" if by_environment else "tasks"
    legend = ", ".join(f"{SYMBOL[s]} {s.value}" for s in Status)
    counts = f"{len(grid.rows)} {noun} x {len(grid.columns)} configurations"
    lines = ["### Grid", "", f"{counts}. Legend: {legend}", "",
             *_tables(grid, folded.shown, folded.folds), ""]
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
