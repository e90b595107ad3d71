"""Issue 7: a crash, a hang or a NaN in one cell never costs the others, and says what happened."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.run.runner import RunOptions, run_cells
from harness.spec.cell import Cell
from harness.truth.outcome import Status
from tests.harness.runner_helpers import assert_no_leftovers, cells_by_id, run_harness, write_matrix

pytestmark = pytest.mark.slow  # real torchrun launches: seconds each


def test_crash_fails_its_cell_with_the_dying_ranks_tail_and_the_rest_runs_afresh(tmp_path: Path) -> None:
    cells = [Cell.from_id("canary_crash-cpu2-ddp-fp32"), Cell.from_id("regression-cpu2-ddp-fp32")]
    start = time.monotonic()
    crash, after = run_cells(cells, RunOptions(tmp_path, timeout_s=60))
    assert time.monotonic() - start < 90  # bounded: torchrun stops rank 0 as soon as rank 1 is gone
    assert crash.status == Status.CRASHED
    assert crash.reason.startswith("rank 1 died (exit code 13)")
    assert "canary_crash: rank 1 dies now, at training step 3" in crash.detail  # the tail of rank 1
    assert after.status == Status.PASSED  # the next cell ran, in a fresh launch
    assert sorted(p.name for p in (tmp_path / "launches").iterdir()) == ["cpu2-001", "cpu2-002"]
    assert_no_leftovers(str(tmp_path))


def test_hang_times_out_with_every_ranks_python_stack(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path)
    start = time.monotonic()
    done = run_harness(
        "run",
        "--matrix",
        str(matrix),
        "-k",
        "canary_hang",
        "--timeout",
        "8",
        "--report-dir",
        str(tmp_path / "r"),
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert time.monotonic() - start < 90
    cell = cells_by_id(tmp_path / "r")["canary_hang-cpu2-ddp-fp32"]
    assert cell["status"] == "timeout"
    assert "--timeout 8 s" in cell["reason"]
    stacks = cell["detail"]
    assert "--- rank0 ---" in stacks and "--- rank1 ---" in stacks
    assert "all_reduce" in stacks  # rank 0 waits in the collective
    assert "canary.py" in stacks and "_inject" in stacks  # rank 1 sits in the canary's sleep
    assert_no_leftovers(str(tmp_path))


def test_nan_fails_and_the_diagnosis_names_the_step(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path)
    done = run_harness(
        "run", "--matrix", str(matrix), "-k", "canary_nan", "--report-dir", str(tmp_path / "r")
    )
    assert done.returncode == 1, done.stderr[-3000:]
    cell = cells_by_id(tmp_path / "r")["canary_nan-cpu1-single-fp32"]
    assert cell["status"] == "failed"
    assert "NaN first at step 4" in cell["reason"]
    losses = next(c for c in cell["comparisons"] if c["quantity"] == "losses")
    assert not losses["ok"] and "4" in str(losses["first_divergence"])
    assert_no_leftovers(str(tmp_path))
