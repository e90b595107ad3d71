"""Issue 7: a crash, a hang or a NaN in one cell never costs the others, and says what happened.

The crash is judged here. The hang and the NaN are judged where the same run already happens
(each canary alone in a launch, through the CLI), so this module does not launch them again:
- the hang (timeout with every rank's Python stack): faults/test_interrupt.py,
  test_hang_times_out_with_every_ranks_python_stack, on its --resume run, whose one cell to run
  is canary_hang-cpu2-ddp-fp32 with --timeout 8;
- the NaN (failed, exit 1, "NaN first at step 4", the losses' first divergence at step 4):
  cli/test_cli.py, test_the_nan_canary_fails_and_the_diagnosis_names_the_step, on its
  --last-failed run, whose one cell to run is canary_nan-cpu1-single-fp32 (and, run among other
  cells, run/test_runner.py, test_nan_canary_diagnosis_names_the_step).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.run.runner import RunOptions, run_cells
from harness.spec.cell import Cell
from harness.truth.outcome import Status
from tests.harness.runner_helpers import assert_no_leftovers

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
