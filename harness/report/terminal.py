"""The terminal side: a live progress bar while cells run, and a final table.

rich draws both when stdout is a terminal. Under CI (the CI variable set), when output is
piped, or when rich is missing, Progress prints one plain line per finished cell instead:
a log file should read well and carry no cursor codes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from harness.judge.outcome import CellResult, Status
from harness.report.near_miss import count_text, near_misses, rule_text
from harness.report.summary import SYMBOL, by_severity, headline

FOLD_AT = 3  # more passed (or same-reason skipped) cells than this share one row

STYLE = {
    Status.PASSED: "green",
    Status.FAILED: "bold red",
    Status.SKIPPED: "dim",
    Status.XFAILED: "yellow",
    Status.XPASSED: "bold dark_orange",
    Status.ERROR: "bold magenta",
    Status.TIMEOUT: "bold red",
    Status.CRASHED: "bold red",
}


def _live_allowed(stream: IO[str]) -> bool:
    if os.environ.get("CI") or os.environ.get("TERM") == "dumb":
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


class Progress:
    """Progress of a run: `cell_started(id)`, `cell_finished(result)`, `close()`.

    enabled=False makes every call a no-op (quiet runs, pytest items).
    """

    def __init__(self, total: int, enabled: bool = True, stream: IO[str] | None = None) -> None:
        self.total = total
        self.enabled = enabled
        self.done = 0
        self.stream = stream or sys.stdout
        self._bar: Any = None
        self._task: Any = None
        if enabled and _live_allowed(self.stream):
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("[bold]matrix"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.description}"),
                console=Console(file=self.stream),
                transient=False,
            )
            self._task = self._bar.add_task("", total=total)
            self._bar.start()

    def cell_started(self, cell_id: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=f"running {cell_id}")

    def cell_finished(self, result: CellResult) -> None:
        if not self.enabled:
            return
        self.done += 1
        status = Status(result.status)
        if self._bar is not None:
            # Problems are printed above the bar as they happen; passes only advance it.
            if status is not Status.PASSED:
                from rich.markup import escape

                # Reasons are text, not markup: `pip install "accelerate-core[deepspeed]"`.
                reason = escape(result.reason)
                line = f"[{STYLE[status]}]{status.value:>8}[/] {escape(result.id)}  [dim]{reason}[/]"
                self._bar.console.print(line)
            self._bar.advance(self._task)
            return
        width = len(str(self.total))
        reason = f"  {result.reason}" if result.reason and status is not Status.PASSED else ""
        counter = f"[{self.done:>{width}}/{self.total}]"
        print(
            f"{counter} {status.value:>8} {result.id} ({result.duration_s:.1f}s){reason}",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


@dataclass
class Row:
    """One line of the final table: a cell, or several passed/skipped cells folded together."""

    cell: str
    status: Status
    duration_s: float
    reason: str
    emulated: bool = False


def summary_rows(results: Sequence[CellResult], full: bool = False) -> list[Row]:
    """Rows worst first. Unless `full`, passed cells fold into one row (one more for emulated
    ones) and skipped cells into one row per reason: a CPU machine skips every CUDA cell, and
    a hundred identical lines would hide the few that matter."""
    rows: list[Row] = []
    folded: dict[tuple[Status, str, bool], list[CellResult]] = {}
    for r in by_severity(results):
        status = Status(r.status)
        if full or status not in (Status.PASSED, Status.SKIPPED):
            rows.append(Row(r.id, status, r.duration_s, r.reason, r.emulated))
        else:
            folded.setdefault((status, r.reason, r.emulated), []).append(r)
    for (status, reason, emulated), group in folded.items():
        if len(group) <= FOLD_AT:
            rows += [Row(r.id, status, r.duration_s, r.reason, r.emulated) for r in group]
        else:
            label = f"{len(group)} cells ({group[0].id}, ...)"
            rows.append(Row(label, status, sum(r.duration_s for r in group), reason, emulated))
    return rows


def near_miss_lines(results: Sequence[CellResult]) -> list[str]:
    """The closing lines after the headline: each passed cell at 80% or more of a tolerance,
    with the quantity and the share (nothing when there is none: a quiet run stays quiet)."""
    misses = near_misses(results)
    if not misses:
        return []
    width = max(len(m.id) for m in misses)
    return [f"{count_text(misses)} ({rule_text()}):", *(f"  {m.id:<{width}}  {m.text}" for m in misses)]


def print_summary(results: Sequence[CellResult], stream: IO[str] | None = None, full: bool = False) -> None:
    """Print the final table (worst first; see summary_rows), a one-line headline and the near
    misses under it."""
    stream = stream or sys.stdout
    rows = summary_rows(results, full)
    closing = near_miss_lines(results)
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:
        for row in rows:
            print(f"{row.status.value:>8} {row.cell:<40} {row.duration_s:6.1f}s {row.reason}", file=stream)
        print(headline(results), file=stream)
        for line in closing:
            print(line, file=stream)
        return
    table = Table(title="Matrix results", show_lines=False)
    for column, justify in (("cell", "left"), ("status", "left"), ("time", "right"), ("reason", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        label = f"{SYMBOL[row.status]} {row.status.value}" + (" (emulated)" if row.emulated else "")
        # Text(), not markup: a reason such as `pip install "accelerate-core[deepspeed]"` stays whole.
        table.add_row(
            Text(row.cell), Text(label, style=STYLE[row.status]), f"{row.duration_s:.1f}s", Text(row.reason)
        )
    # A log file (CI) is not 80 columns wide: give reasons room instead of cutting them.
    is_tty = bool(getattr(stream, "isatty", lambda: False)())
    console = Console(file=stream, width=None if is_tty else 160)
    console.print(table)
    console.print(f"[bold]{headline(results)}[/]", soft_wrap=True)
    for index, line in enumerate(closing):  # Text(): a cell id is not markup
        console.print(Text(line, style="bold yellow" if index == 0 else "yellow"), soft_wrap=True)
