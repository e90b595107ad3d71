"""`--profile`: where a run's time went, from what the launch and its cells measured.

One run serves both tests: `python -m harness run --profile` (in this process: harness.cli.main.main;
its launch a real torchrun) of two cpu1 cells, which share one launch. Its report dir holds what
the runner measured (report.json's environment.startup, each cell's result); its stdout is what
the CLI printed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.judge.outcome import CellResult, Status
from harness.layout.report_dir import ReportDir
from harness.run.profile import CELL_PHASES, profile_lines
from tests.harness.runner_helpers import (
    SMALL_MATRIX,
    output_tail,
    report,
    run_harness_in_process,
    write_matrix,
)

# The small matrix in fp32 and bf16: `-k cpu1` selects regression-cpu1-single-fp32 and -bf16.
TWO_PRECISIONS = SMALL_MATRIX.replace('precision = ["fp32"]', 'precision = ["fp32", "bf16"]')


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`run --profile` of regression-cpu1-single-fp32 and -bf16: its report dir and its output."""
    folder = tmp_path_factory.mktemp("profile")
    report_dir = folder / "r"
    done = run_harness_in_process("run", "--matrix", str(write_matrix(folder, TWO_PRECISIONS)), "-k", "cpu1",
                                  "--profile", "--report-dir", str(report_dir))
    return report_dir, done


def test_a_run_records_its_start_up_every_cell_phase_and_its_judging(
    profiled: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    report_dir, done = profiled
    assert (report_dir / "report.json").is_file(), output_tail(done)
    results = [CellResult.from_json(cell) for cell in report(report_dir)["cells"]]
    assert sorted(r.id for r in results) == ["regression-cpu1-single-bf16", "regression-cpu1-single-fp32"], (
        output_tail(done))
    assert [r.status for r in results] == [Status.PASSED, Status.PASSED], output_tail(done)
    startup = report(report_dir)["environment"]["startup"]
    assert startup is not None
    # startup.json, the report dir's documented copy, holds the same figures.
    assert json.loads(ReportDir(report_dir).startup.read_text(encoding="utf-8")) == startup
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


def test_the_cli_prints_the_profile_when_asked(
    profiled: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, done = profiled
    assert done.returncode == 0, done.stderr[-2000:]
    assert "where the time went:" in done.stdout and "launch start-up" in done.stdout
