"""The matrix as pytest items: shared launches, cached results, reports of pytest runs.

The first item of a launch group to run asks harness.run.runner.run_cells for every *selected*
cell of its group at once (one launch, as `python -m harness run` does), caches the results,
and each item then asserts its own. Under pytest-xdist (`-n 2 --dist loadgroup`), the first
worker to reach a group runs it and the others read its results (a lock and a file per group),
so a group is launched once whatever the --dist mode. Items also carry `xdist_group` marks
named by launch group, for when xdist's grouping works again (see _run_group).

Settings: pytest options --matrix-env, --matrix-report-dir, --matrix-timeout, --matrix-file, each
with an environment variable as the fallback (MATRIX_ENV, ...; the option wins): see
tests/matrix/options.py.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import pytest

from harness.atomic_files import write_text_atomic
from harness.judge.outcome import CellResult
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.report import environment_info, write_reports
from harness.run.runner import RunInterrupted, RunOptions, launch_group_key, run_cells
from tests.matrix.options import REPO_ROOT, MatrixSettings

__all__ = ["REPO_ROOT", "MatrixSession", "MatrixSettings", "cell_of"]


def cell_of(item: pytest.Item) -> Cell | None:
    callspec = getattr(item, "callspec", None)
    cell = callspec.params.get("cell") if callspec is not None else None
    return cell if isinstance(cell, Cell) else None


class MatrixSession:
    """Results of the cells run in this pytest process, filled one launch group at a time."""

    def __init__(self, items: Iterable[pytest.Item], settings: MatrixSettings | None = None) -> None:
        """`settings`: the pytest run's (its options); None: the environment variables and defaults."""
        self.items = list(items)
        self.settings = settings or MatrixSettings.of()
        self.results: dict[str, CellResult] = {}
        self.matrix = load_matrix(self.settings.file)
        self.order = {cell.id: i for i, cell in enumerate(self.matrix.all_cells())}

    def result_for(self, cell: Cell) -> CellResult:
        if cell.id not in self.results:
            self._run_group(launch_group_key(cell), cell)
        return self.results[cell.id]

    def _run_group(self, key: str, cell: Cell) -> None:
        # Every selected item of this group not run yet (this item included, even if the
        # session's item list somehow lacks it).
        group = [c for c in map(cell_of, self.items) if c is not None and launch_group_key(c) == key]
        cells = list({c.id: c for c in [*group, cell] if c.id not in self.results}.values())
        run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
        if run_id is None:
            self.results.update({r.id: r for r in self._launch(cells)})
            return
        # Under xdist, items of one group may sit on several workers: `--dist loadgroup` would
        # prevent that, but pytest-xdist 3.8 cannot group on pytest 9.2 (it renames
        # `item._nodeid`, which pytest 9.2 no longer reads). So the first worker to reach a
        # group runs it for everyone (every worker collects the same selection), and the others
        # wait on the group's lock and read its results: one launch per group whatever --dist.
        shared = self.settings.report_dir / "work" / "runs" / run_id
        shared.mkdir(parents=True, exist_ok=True)
        done = shared / f"{key}.json"
        with (shared / f"{key}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released if this worker dies: another one reruns
            if not done.is_file():
                results = self._launch(cells)
                write_text_atomic(done, json.dumps([r.to_json() for r in results]))
            self.results.update({d["id"]: CellResult.from_json(d) for d in json.loads(done.read_text())})

    def _launch(self, cells: list[Cell]) -> list[CellResult]:
        options = RunOptions(
            report_dir=self._work_dir(),
            timeout_s=self.settings.timeout_s,
            env_name=self.settings.env,
            matrix=self.matrix,
            exact=self.settings.exact,
        )
        try:
            return run_cells(cells, options)
        except RunInterrupted as exc:  # Ctrl-C: keep what finished for the report, then stop
            self.results.update({r.id: r for r in exc.results})
            raise KeyboardInterrupt from exc

    def _work_dir(self) -> Path:
        # Records of each xdist worker in their own folder: two launches never share files.
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        return self.settings.report_dir / "work" / worker

    def write_reports(self) -> Path | None:
        """Write this process's results; under xdist, merge every worker's part of this run."""
        if not self.results:
            return None
        target = self.settings.report_dir
        results = sorted(self.results.values(), key=lambda r: self.order.get(r.id, len(self.order)))
        run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
        if run_id is None:
            write_reports(results, environment_info(self.settings.env), target)
            return target
        parts = target / "parts" / run_id
        parts.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
        (parts / f"{worker}.json").write_text(json.dumps([r.to_json() for r in results]))
        with (target / ".lock").open("w") as lock:
            # Workers finish in any order; each merges all parts so far, the last one has all.
            fcntl.flock(lock, fcntl.LOCK_EX)
            merged: dict[str, CellResult] = {}
            for part in sorted(parts.glob("*.json")):
                merged.update({d["id"]: CellResult.from_json(d) for d in json.loads(part.read_text())})
            ordered = sorted(merged.values(), key=lambda r: self.order.get(r.id, len(self.order)))
            write_reports(ordered, environment_info(self.settings.env), target)
            for folder in (target / "parts", target / "work" / "runs"):  # earlier runs' leftovers
                for old in folder.iterdir() if folder.is_dir() else []:
                    if old.name != run_id:
                        shutil.rmtree(old, ignore_errors=True)
        return target
