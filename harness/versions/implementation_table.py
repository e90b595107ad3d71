"""Behaviour x release for another implementation (Hugging Face Accelerate): read from the runs.

Each row is one `[[expected]]` entry of matrix.toml that the implementation's cells were judged
by (what the matrix found that implementation doing: "cpu=True with a DeepSpeedPlugin runs DDP",
...), plus one row for the cells no entry declares (the ones that must pass). Each column is one
environment's report dir (one release). Each entry is read from that run's report.json, from the
cells the entry judged (`extra.expected_entry`, written by the judge), never written by hand:

- **present**: every such cell failed the declared way (xfailed): the behaviour is still there;
- **fixed**: every such cell passed (xpassed): the release no longer does it;
- **other**: a cell failed another way than declared (the first one is named);
- **not declared**: no cell of that run was judged by the entry (a version condition on the
  entry, `accelerate_versions`, leaves that release out, or its cells were not selected).

A mixture says both counts ("present 20, fixed 7"). Below the rows: passed / declared / failed
counts and the run's wall time (report.json's start-up profile).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

from harness.judge.outcome import CellResult, Status
from harness.plan.matrix_entries import Expected

NO_ENTRY = 0  # the row of the cells no [[expected]] entry declares


class _Report(Protocol):  # harness.report.merge.EnvironmentReport, or any report read the same way
    name: str
    environment: dict[str, Any]
    results: list[CellResult]


@dataclass(frozen=True)
class Column:
    name: str  # the environment
    release: str  # the implementation's installed release, from report.json's environment
    results: tuple[CellResult, ...]  # that implementation's cells only
    wall_s: float | None


def _release(environment: dict[str, Any], implementation: str) -> str:
    return str(environment.get(implementation) or "?")


def _wall(environment: dict[str, Any]) -> float | None:
    profile = (environment.get("startup") or {}).get("profile") or {}
    wall = profile.get("wall_s")
    return float(wall) if isinstance(wall, (int, float)) else None


def columns(reports: list[_Report], implementation: str = "accelerate") -> list[Column]:
    """One column per report that holds cells of `implementation`, in the order given."""
    found = []
    for report in reports:
        mine = tuple(r for r in report.results if r.cell.implementation == implementation)
        if mine:
            found.append(Column(report.name, _release(report.environment, implementation), mine,
                                _wall(report.environment)))
    return found


def entry_of(result: CellResult) -> int:
    entry = result.extra.get("expected_entry", NO_ENTRY)
    return entry if isinstance(entry, int) else NO_ENTRY


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def entry_title(entry: Expected, implementation: str = "accelerate", limit: int = 150) -> str:
    """`#N` and the cells it selects (its axes, the implementation and device left out), then its
    reason, shortened: what the row is about, in the matrix's own words."""
    axes = ", ".join(f"{key} {'/'.join(map(str, values))}" for key, values in entry.match.values.items()
                     if key not in ("implementation", "device"))
    condition = f" (accelerate {entry.accelerate_versions.text})" if entry.accelerate_versions else ""
    where = f" [{axes}]" if axes else ""
    return f"#{entry.index}{where}{condition}: {_short(entry.reason, limit)}"


def verdict(results: list[CellResult]) -> str:
    """The entry of one row and column, from the cells that entry judged in that run."""
    if not results:
        return "not declared"
    counts = Counter(Status(r.status) for r in results)
    other = [r for r in results if Status(r.status) not in (Status.XFAILED, Status.XPASSED)]
    parts = []
    if counts[Status.XFAILED]:
        parts.append(f"present {counts[Status.XFAILED]}")
    if counts[Status.XPASSED]:
        parts.append(f"fixed {counts[Status.XPASSED]}")
    if other:
        first = other[0]
        parts.append(f"other {len(other)} (first {first.id}: {first.status.value}: "
                     f"{_short(first.reason, 160)})")
    return ", ".join(parts)


def undeclared_verdict(results: list[CellResult]) -> str:
    """The cells no entry declares: they must pass."""
    if not results:
        return "no cell"
    passed = [r for r in results if Status(r.status) is Status.PASSED]
    skipped = [r for r in results if Status(r.status) is Status.SKIPPED]
    failing = [r for r in results if r not in passed and r not in skipped]
    text = f"passed {len(passed)}"
    if skipped:
        text += f", skipped {len(skipped)}"
    if failing:
        first = failing[0]
        text += (f", failed {len(failing)} (first {first.id}: {first.status.value}: "
                 f"{_short(first.reason, 160)})")
    return text


def behaviour_rows(cols: list[Column], expected: list[Expected],
                   implementation: str = "accelerate") -> list[tuple[str, list[str]]]:
    """(title, one entry per column): every [[expected]] entry of the implementation, and every
    other entry a cell of it was judged by, in the matrix's order; then the undeclared cells."""
    used = {entry_of(r) for col in cols for r in col.results}
    rows = []
    for entry in expected:
        own = implementation in entry.match.values.get("implementation", ())
        if not own and entry.index not in used:
            continue
        rows.append((entry_title(entry, implementation),
                     [verdict([r for r in col.results if entry_of(r) == entry.index]) for col in cols]))
    known = {entry.index for entry in expected}
    strays = sorted(used - known - {NO_ENTRY})  # judged by an entry this matrix no longer has
    for index in strays:
        rows.append((f"#{index} (not in this matrix.toml)",
                     [verdict([r for r in col.results if entry_of(r) == index]) for col in cols]))
    rows.append(("no entry declares them (these cells must pass)",
                 [undeclared_verdict([r for r in col.results if entry_of(r) == NO_ENTRY]) for col in cols]))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def counts_line(col: Column) -> str:
    statuses = [Status(r.status) for r in col.results]
    passed = sum(s is Status.PASSED for s in statuses)
    declared = sum(s is Status.XFAILED for s in statuses)
    failed = sum(s.is_unexpected_failure for s in statuses)
    return f"{passed} / {declared} / {failed}"


def implementation_markdown(reports: list[_Report], expected: list[Expected],
                            implementation: str = "accelerate") -> list[str]:
    """The behaviour x release table (markdown lines); [] when no report holds such cells."""
    cols = columns(reports, implementation)
    if not cols:
        return []
    header = "| behaviour (matrix.toml `[[expected]]`) | " + " | ".join(
        f"`{c.name}` ({implementation} {c.release})" for c in cols) + " |"
    lines = [header, "|---|" + "---|" * len(cols)]
    for title, entries in behaviour_rows(cols, expected, implementation):
        lines.append(f"| {_cell(title)} | " + " | ".join(_cell(e) for e in entries) + " |")
    lines.append("| passed / declared failures / failed | " + " | ".join(counts_line(c) for c in cols) + " |")
    lines.append("| wall s | " + " | ".join("?" if c.wall_s is None else f"{c.wall_s:.0f}" for c in cols)
                 + " |")
    return lines
