"""`--profile`: where a run's time went, from what the launch and its cells measured."""

from __future__ import annotations

from pathlib import Path

from harness.run.profile import CELL_PHASES, profile_lines
from harness.run.runner import RunOptions, run_cells
from harness.run.startup import read_startup
from harness.spec.cell import Cell
from harness.truth.outcome import Status
from tests.harness.runner_helpers import run_harness, write_matrix


def test_a_run_records_its_start_up_every_cell_phase_and_its_judging(tmp_path: Path) -> None:
    cells = [Cell.from_id("regression-cpu1-single-fp32"), Cell.from_id("regression-cpu1-single-bf16")]
    results = run_cells(cells, RunOptions(tmp_path, timeout_s=120))
    assert [r.status for r in results] == [Status.PASSED, Status.PASSED]
    startup = read_startup(tmp_path)
    assert startup is not None
    profile = startup["profile"]
    assert isinstance(profile, dict) and profile["launches"] == 1 and profile["cells"] == 2
    seconds = profile["seconds"]
    for part in ["launch start-up", "judging", *(f"cell {phase}" for phase in CELL_PHASES)]:
        assert seconds[part] > 0, part
    # The cells' phases are their durations, split: nothing counted twice, nothing lost.
    phases = sum(seconds[f"cell {phase}"] for phase in CELL_PHASES)
    assert abs(phases - sum(r.duration_s for r in results)) < 0.05 * phases + 0.01
    lines = profile_lines(profile)
    assert lines[0].startswith("where the time went:") and any("cell training" in line for line in lines)


def test_the_cli_prints_the_profile_when_asked(tmp_path: Path) -> None:
    done = run_harness("run", "--matrix", str(write_matrix(tmp_path)), "-k", "cpu1", "--profile",
                       "--report-dir", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "where the time went:" in done.stdout and "launch start-up" in done.stdout
