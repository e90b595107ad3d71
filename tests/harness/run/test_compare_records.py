"""`python -m harness run --compare-records DIR` across versions: every cell's numbers against the
other environment's record, classed bit-identical / within tolerance / diverged, in report.json,
report.md and on the terminal, while the golden alone decides the verdict. Two real cpu1 launches;
the CLI runs in this process (harness.cli.main.main), which changes nothing it is asked to show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.judge.outcome import Status
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.record.record_format import Record
from harness.run.runner import RunOptions, run_cells
from tests.harness.runner_helpers import cells_by_id, report, run_harness_in_process

# Reads the goldens: run again against goldens made elsewhere (nox -s foreign_goldens).
pytestmark = pytest.mark.goldens

CELL = "regression-cpu1-single-fp32"


def test_numbers_moved_inside_the_tolerance_are_reported_and_the_cell_still_passes(tmp_path: Path) -> None:
    # The other environment: another torch release (so no bit-for-bit rule), its record this
    # machine's own record of the cell with one weight moved by a quarter of the cell's absolute
    # tolerance. (Not the golden: the golden may come from another CPU, whose last bits differ
    # elsewhere too.)
    other = tmp_path / "other"
    [here] = run_cells([Cell.from_id(CELL)], RunOptions(tmp_path / "here", timeout_s=120))
    assert here.status == Status.PASSED, here.reason
    moved = Record.load(tmp_path / "here" / "records" / CELL)
    name = next(iter(moved.state_dict))
    moved.state_dict[name].view(-1)[0] += load_matrix().tolerance_for("fp32", "single").atol / 4
    moved.save(other / "records" / CELL)
    (other / "report.json").write_text(json.dumps({"environment": {"name": "older_torch", "torch": "2.12.0"},
                                                   "cells": []}))
    report_dir = tmp_path / "r"
    done = run_harness_in_process("run", "-k", CELL,
                                  "--report-dir", str(report_dir), "--compare-records", str(other))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    cell = cells_by_id(report_dir)[CELL]
    assert cell["status"] == "passed"
    change = cell["extra"]["record_change"]
    assert change["against"] == "older_torch" and change["change"] == "within tolerance"
    assert change["first_difference"] == f"state_dict/{name}"
    summary = report(report_dir)["record_changes"]
    assert summary["counts"]["within tolerance"] == 1 and summary["counts"]["diverged"] == 0
    assert "numbers against older_torch: 0 bit-identical, 1 within tolerance, 0 diverged" in done.stdout
    md = (report_dir / "report.md").read_text()
    assert "### Numbers against another environment" in md and f"| `{CELL}` | within tolerance |" in md
