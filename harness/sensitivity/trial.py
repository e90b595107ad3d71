"""Trying one catalog entry: patch a copy of the core, run the entry's cells against it through
`python -m harness run` (a child process whose working directory holds the copy, so the copy
comes first on every rank's path), and read the verdict from the report.

A control comes first (`control_run`): the same cells, run the same way on an unpatched copy
of the core. Only a cell that passed in the control can catch a bug: a cell that fails without
any patch proves nothing about the patch.

Caught: at least one selected cell that passed in the control failed on its numbers or its
evidence (a judged record). Missed: every cell that ran passed; the closest comparison (the highest share
of its tolerance) is kept to show how far the bug was from being seen. A catalog error: the patch
did not apply, the selection ran no cell here, a cell's evidence shows it ran another copy of
the core, or the patched core raised, crashed or hung instead of running silently wrong; it is
reported apart and counts as neither.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.layout.report_dir import ReportDir
from harness.sensitivity.bug import Bug, CatalogError, core_copy, patched_copy

Verdict = Literal["caught", "missed", "catalog_error"]
UNEXPECTED = {"failed", "error", "crashed", "timeout", "xpassed"}
# A catch is a cell judged wrong from its finished record: its numbers left the golden's
# tolerance, or its evidence showed that something else ran. A patch that makes training raise,
# crash or hang imitates no silent bug, so it is a catalog error, not a catch.
JUDGED_FAILURES = {"divergence", "evidence"}


@dataclass
class Trial:
    bug: Bug
    verdict: Verdict
    seconds: float
    detail: str  # caught: the first failing cell and its reason; missed: the closest comparison
    cells: dict[str, str] = field(default_factory=dict)  # cell id -> status

    def to_json(self) -> dict[str, Any]:
        return {"name": self.bug.name, "area": self.bug.area, "select": self.bug.select,
                "imitates": self.bug.imitates, "verdict": self.verdict,
                "seconds": round(self.seconds, 1), "detail": self.detail, "cells": self.cells}


@dataclass
class Control:
    """The unpatched core on the union of the entries' cells: cell id -> status."""

    statuses: dict[str, str]
    seconds: float

    @property
    def passed(self) -> set[str]:
        return {cell for cell, status in self.statuses.items() if status == "passed"}

    def line(self) -> str:
        counts: dict[str, int] = {}
        for status in self.statuses.values():
            counts[status] = counts.get(status, 0) + 1
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        return f"control (unpatched core): {len(self.statuses)} cell(s): {summary} ({self.seconds:.0f} s)"


def control_run(bugs: list[Bug], *, timeout_s: float, keep: Path | None = None,
                affected: bool = False, exact: bool = False) -> Control:
    """Every cell the entries select, on an unpatched copy of the core, through the same
    `python -m harness run` as a trial, but with the cells of one launch shape sharing a launch
    (a trial isolates its cells only so that a failure gets no confirming rerun; a cell's record
    does not depend on the cells before it in its launch: tests/harness/run/test_cell_isolation.py).
    One launch per shape instead of one per cell: the control is the whole catalog's cells.
    With `affected`, the cells each entry touches (the kill matrix) rather than its selection;
    with `exact`, judged with the exact tier too (`run --exact`), as the trials then are."""
    start = time.monotonic()
    selection = " or ".join(f"({bug.affected if affected else bug.select})" for bug in bugs)
    with tempfile.TemporaryDirectory(prefix="sensitivity-control-") as tmp:
        workdir = core_copy(Path(tmp))
        report = run_cells("control", selection, workdir, timeout_s, keep, isolate=False, exact=exact)
    statuses = {c["id"]: c["status"] for c in report.get("cells", []) if c.get("status") != "skipped"}
    return Control(statuses, time.monotonic() - start)


def try_bug(bug: Bug, *, timeout_s: float, control: Control, keep: Path | None = None,
            exact: bool = False) -> Trial:
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"sensitivity-{bug.name}-") as tmp:
        workdir = Path(tmp)
        try:
            patched_copy(bug, workdir)
            _refuse_unproven_before_running(bug, control)
            report = run_cells(bug.name, bug.select, workdir, timeout_s, keep, exact=exact)
            verdict, detail, cells = _verdict(bug, report, workdir, control)
        except CatalogError as exc:
            return Trial(bug, "catalog_error", time.monotonic() - start, str(exc))
    return Trial(bug, verdict, time.monotonic() - start, detail, cells)


def _refuse_unproven_before_running(bug: Bug, control: Control) -> None:
    """A cell of this entry that did not pass in the control is a catalog error whatever the patch
    does: said before a launch is spent on it (`_verdict` checks every cell that ran as well)."""
    from harness.plan.cell import Cell
    from harness.plan.selection import keyword_matches

    failing = []
    for cell_id, status in control.statuses.items():
        try:
            cell = Cell.from_id(cell_id)
        except ValueError:  # not a cell id of this matrix: left to the check after the run
            continue
        if status != "passed" and keyword_matches(cell, bug.select):
            failing.append(cell_id)
    if failing:
        failing.sort()
        raise CatalogError(f"{bug.name}: cell(s) {', '.join(failing)} did not pass in the control run "
                           f"(unpatched: {', '.join(control.statuses[c] for c in failing)})")


def report_dir_for(name: str, workdir: Path, keep: Path | None) -> Path:
    """Where a run of `name` writes its report: under `keep` (--keep-reports) when given, resolved
    against this process's working directory, since the run itself starts in `workdir` (a relative
    `keep` made the run write into the temporary copy, and the report was looked for in vain)."""
    return (keep.resolve() / name) if keep is not None else workdir / "report"


def run_cells(name: str, select: str, workdir: Path, timeout_s: float, keep: Path | None, *,
               isolate: bool = True, exact: bool = False) -> dict[str, Any]:
    report_dir = report_dir_for(name, workdir, keep)
    env = dict(os.environ)
    # The copy first: the working directory is first on the path of `python -m` and `-c`
    # processes (the runner's launcher and every rank), PYTHONPATH for anything else.
    env["PYTHONPATH"] = os.pathsep.join([str(workdir), *filter(None, [env.get("PYTHONPATH")])])
    # --isolate: one launch per cell, and no confirming rerun of a failure in a second launch
    # (the catalog asks whether a bug is seen at all; a flaky catch would show as a miss on the
    # next run of the catalog, which CI repeats on every push).
    command = [sys.executable, "-m", "harness", "run", "-k", select, "--report-dir", str(report_dir),
               "--overwrite", "-q", *(["--isolate"] if isolate else []), *(["--exact"] if exact else []),
               "--timeout", str(timeout_s)]
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, check=False)
    report = ReportDir(report_dir).report_json
    if not report.is_file():
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise CatalogError(f"{name}: `harness run -k {select!r}` wrote no report (exit "
                           f"{done.returncode}): {' | '.join(tail)}")
    loaded: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    return loaded


def _verdict(bug: Bug, report: dict[str, Any], workdir: Path,
             control: Control) -> tuple[Verdict, str, dict[str, str]]:
    ran = [c for c in report.get("cells", []) if c.get("status") != "skipped"]
    cells = {c["id"]: c["status"] for c in ran}
    if not ran:
        raise CatalogError(f"{bug.name}: -k {bug.select!r} ran no cell here (all skipped or none selected)")
    unproven = sorted(c["id"] for c in ran if c["id"] not in control.passed)
    if unproven:  # such a cell fails (or was never run) without the patch: it can prove nothing
        raise CatalogError(f"{bug.name}: cell(s) {', '.join(unproven)} did not pass in the control run "
                           f"(unpatched: {', '.join(control.statuses.get(c, 'not run') for c in unproven)})")
    copy = str((workdir / "accelerate_core").resolve())
    for cell in ran:
        core = ((cell.get("extra") or {}).get("evidence") or {}).get("core_path")
        if core is not None and core != copy:
            raise CatalogError(f"{bug.name}: cell {cell['id']} ran the core at {core}, not the patched copy")
    judged = [c for c in ran if c["status"] == "failed" and c.get("failure") in JUDGED_FAILURES]
    if judged:
        first = judged[0]
        return "caught", f"{first['id']} {first['status']}: {first.get('reason', '')}", cells
    broken = [c for c in ran if c["status"] in UNEXPECTED]
    if broken:  # the patch made the core raise, crash or hang: that is not the silent bug it imitates
        first = broken[0]
        raise CatalogError(f"{bug.name}: the patched core did not run silently wrong: {first['id']} "
                           f"{first['status']}: {first.get('reason', '')}")
    return "missed", _closest(ran), cells


def _closest(cells: list[dict[str, Any]]) -> str:
    """The comparison that came nearest to its tolerance, over every cell that ran."""
    return max((closest_comparison(cell) for cell in cells), key=lambda found: found[0])[1]


def closest_comparison(cell: dict[str, Any]) -> tuple[float, str]:
    """A cell's comparison that came nearest to its tolerance: (share of tolerance, sentence)."""
    best: tuple[float, str] = (-1.0, "no comparison recorded")
    for comparison in cell.get("comparisons", []):
        used = comparison.get("tolerance_used")
        if isinstance(used, (int, float)) and used > best[0]:
            best = (float(used), f"{cell['id']}: {comparison['quantity']} at {used:.0%} of tolerance "
                    f"(max |diff| {comparison.get('max_abs_diff', float('nan')):.3g}, atol "
                    f"{comparison.get('atol')}, rtol {comparison.get('rtol')})")
    return best
