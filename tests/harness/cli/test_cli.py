"""`python -m harness list|run|ci` as a person runs it.

The commands run in this process (harness.cli.main.main, through run_harness_in_process: the
exit status, stdout and stderr a subprocess would give; every launch a real torchrun), except
where the process is the point: `python -m harness list` in a pipe. Runs are shared within the
module, so the module makes four launches, which also serve the determinism check of
faults/test_atomic_and_determinism.py and the NaN canary of faults/test_canaries.py (each of
which made two launches of its own):
- `default_runs`: the same `run` twice without --report-dir, in a folder of its own (two
  launches of regression-cpu2-ddp-fp32), the second with --compare-records of the first. The
  second run's report is what test_run_writes_every_report... reads; the two runs' records are
  what test_same_cpu_fp32_cell_twice_is_bit_identical compares; a copy of the first run's
  folder is where the refusal and --overwrite are tried (no launch); a copy of the second run's
  report is what --last-failed resumes.
- `last_failed`: that --last-failed run, whose one cell to run is the NaN canary alone in a
  launch (then its confirming rerun): exactly the run faults/test_canaries.py made for the NaN
  canary, so that verdict through the CLI is judged here now
  (test_the_nan_canary_fails_and_the_diagnosis_names_the_step).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.runner_helpers import (
    REPO_ROOT,
    assert_no_leftovers,
    cells_by_id,
    output_tail,
    run_harness_in_process,
    write_matrix,
)


def _ds() -> bool:
    from accelerate_core.imports import is_deepspeed_available

    return is_deepspeed_available()


# The CPU cell the default runs run (two processes: DDP): what the determinism check runs twice.
CPU_CELL = "regression-cpu2-ddp-fp32"


@dataclass
class DefaultRuns:
    """Two runs of the same command without --report-dir, in `folder` (their cwd); the second
    also compares its records with the first's (--compare-records)."""

    folder: Path
    matrix: Path
    first: subprocess.CompletedProcess[str]
    second: subprocess.CompletedProcess[str]

    def report_dir(self, done: subprocess.CompletedProcess[str]) -> Path:
        return chosen_report_dir(self.folder, done)


def chosen_report_dir(cwd: Path, done: subprocess.CompletedProcess[str]) -> Path:
    """The folder a run in `cwd` chose for itself, from its last line (`report: DIR/report.html`)."""
    lines = [line for line in done.stdout.splitlines() if line.startswith("report: ")]
    assert lines, f"the run printed no `report:` line\n{output_tail(done)}"
    return cwd / Path(lines[-1].removeprefix("report: ")).parent


@pytest.fixture(scope="module")
def default_runs(tmp_path_factory: pytest.TempPathFactory) -> DefaultRuns:
    """`run` twice, the same command, without --report-dir: each must make its own folder under
    reports/runs/. The selection is a CPU cell that runs and a CUDA cell that is skipped here.
    The second run adds --compare-records of the first run's folder: the same cell run twice
    must give bit-identical records (test_same_cpu_fp32_cell_twice_is_bit_identical)."""
    folder = tmp_path_factory.mktemp("default-runs")
    matrix = write_matrix(folder)
    args = ("run", "--matrix", str(matrix), "-k", f"{CPU_CELL} or cuda", "--env-name",
            "deepspeed" if _ds() else "nodeepspeed", "-q")
    env = {"PYTHONPATH": str(REPO_ROOT)}  # the launches start in `folder`, outside the repository
    first = run_harness_in_process(*args, cwd=folder, env=env)
    second = run_harness_in_process(*args, "--compare-records", str(chosen_report_dir(folder, first)),
                                    cwd=folder, env=env)
    return DefaultRuns(folder, matrix, first, second)


def test_list_shows_markers_and_skip_reasons_and_hides_canaries(tmp_path: Path) -> None:
    matrix = str(write_matrix(tmp_path))
    done = run_harness_in_process("list", "--matrix", matrix)
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("regression")}
    assert set(lines) == {
        "regression-cpu1-single-fp32",
        "regression-cpu2-ddp-fp32",
        "regression-cuda2-ddp-fp32",
    }
    assert "matrix,ddp" in lines["regression-cpu2-ddp-fp32"] and "runs" in lines["regression-cpu2-ddp-fp32"]
    assert "skip: needs 2 CUDA devices, found 0" in lines["regression-cuda2-ddp-fp32"]
    assert "canary" not in done.stdout
    canaries = run_harness_in_process("list", "--matrix", matrix, "-k", "canary")
    assert canaries.stdout.count("canary_") == 3 and "3 cell(s)" in canaries.stdout


def test_run_writes_every_report_and_exits_0_when_nothing_failed(default_runs: DefaultRuns) -> None:
    done = default_runs.second
    assert done.returncode == 0, output_tail(done)
    report_dir = default_runs.report_dir(done)
    for name in ("report.json", "junit.xml", "report.md", "report.html"):
        assert (report_dir / name).stat().st_size > 0
    cells = cells_by_id(report_dir)
    assert cells[CPU_CELL]["status"] == "passed"
    assert cells["regression-cuda2-ddp-fp32"]["status"] == "skipped"
    assert cells[CPU_CELL]["environment"] in ("deepspeed", "nodeepspeed")


@pytest.mark.slow
def test_same_cpu_fp32_cell_twice_is_bit_identical(default_runs: DefaultRuns) -> None:
    """(From faults/test_atomic_and_determinism.py, which ran the cell twice itself.) The same
    CPU fp32 cell, run twice, writes byte-identical records, and the second run, given the first
    run's folder with --compare-records, reports the cell bit-identical to it."""
    first, second = default_runs.first, default_runs.second
    assert first.returncode == 0, output_tail(first)
    assert second.returncode == 0, output_tail(second)
    first_dir, second_dir = default_runs.report_dir(first), default_runs.report_dir(second)
    assert first_dir.resolve() != second_dir.resolve()
    bytes_first = (first_dir / "records" / f"{CPU_CELL}.safetensors").read_bytes()
    bytes_second = (second_dir / "records" / f"{CPU_CELL}.safetensors").read_bytes()
    assert bytes_first == bytes_second
    reported = cells_by_id(second_dir)[CPU_CELL]
    cross = next(c for c in reported["comparisons"] if c["quantity"] == "cross_environment")
    assert cross["ok"] and "bit-identical" in reported["extra"]["cross_environment"]
    assert_no_leftovers(str(default_runs.folder))


@pytest.fixture(scope="module")
def last_failed(
    default_runs: DefaultRuns, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """--last-failed on a copy of the second default run's report dir (CPU_CELL passed there),
    selecting that cell and the NaN canary: only the canary runs."""
    first = default_runs.second
    assert first.returncode == 0, f"the run --last-failed resumes failed\n{output_tail(first)}"
    report_dir = tmp_path_factory.mktemp("last-failed") / "r"
    shutil.copytree(default_runs.report_dir(first), report_dir)
    selection = f"{CPU_CELL} or canary_nan"
    again = run_harness_in_process("run", "--matrix", str(default_runs.matrix), "-k", selection,
                                   "--last-failed", "--report-dir", str(report_dir))
    return report_dir, again


def test_last_failed_reruns_only_failures(last_failed: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    report_dir, again = last_failed
    assert "resume: 1 cell(s) kept" in again.stdout and "1 to run" in again.stdout, output_tail(again)
    assert again.returncode == 1, output_tail(again)  # the NaN canary fails
    assert set(cells_by_id(report_dir)) == {CPU_CELL, "canary_nan-cpu1-single-fp32"}


@pytest.mark.slow
def test_the_nan_canary_fails_and_the_diagnosis_names_the_step(
    last_failed: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """A NaN in training fails its cell (exit 1) and the diagnosis names the step the losses first
    went NaN at (moved from faults/test_canaries.py, whose run of the canary this one is)."""
    report_dir, done = last_failed
    assert done.returncode == 1, output_tail(done)
    cell = cells_by_id(report_dir)["canary_nan-cpu1-single-fp32"]
    assert cell["status"] == "failed"
    assert "NaN first at step 4" in cell["reason"]
    losses = next(c for c in cell["comparisons"] if c["quantity"] == "losses")
    assert not losses["ok"] and "4" in str(losses["first_divergence"])
    assert_no_leftovers(str(report_dir.parent))


def test_ci_check_agrees_with_the_committed_workflows() -> None:
    done = run_harness_in_process("ci", "--check")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("reader", ["head -2", "grep -m1 zero3"])
def test_list_behaves_in_a_pipe(reader: str) -> None:
    # A real `python -m harness` (the console entry point) whose reader stops reading early: no
    # BrokenPipeError traceback, SIGPIPE's status (141).
    command = f"set -o pipefail; {sys.executable} -m harness list | {reader}"
    done = subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.stdout.strip() and done.returncode in (0, 141)


def test_a_run_never_silently_replaces_an_earlier_report(default_runs: DefaultRuns, tmp_path: Path) -> None:
    # Without --report-dir: a new folder per run, reports/latest pointing at the newest.
    first, second = default_runs.first, default_runs.second
    assert first.returncode == second.returncode == 0, output_tail(first) + output_tail(second)
    runs = sorted((default_runs.folder / "reports" / "runs").iterdir())
    assert len(runs) == 2 and all((run / "report.json").is_file() for run in runs)
    assert (default_runs.folder / "reports" / "latest").resolve() == runs[-1].resolve()
    assert default_runs.report_dir(second).resolve() == runs[-1].resolve()  # the newest is the second's
    # With --report-dir holding an earlier report (a copy of the first run's folder: the shared
    # runs stay as they are for the other tests): refused (exit 2, report intact) ...
    matrix = str(default_runs.matrix)
    earlier = tmp_path / runs[0].name
    shutil.copytree(runs[0], earlier)
    before = (earlier / "report.json").read_text()
    refused = run_harness_in_process("run", "--matrix", matrix, "-k", CPU_CELL, "--report-dir", str(earlier))
    assert refused.returncode == 2 and "holds the report of an earlier run (1 passed" in refused.stderr
    assert "--overwrite" in refused.stderr and (earlier / "report.json").read_text() == before
    # ... unless asked to replace it. (A selection that launches nothing, hence --allow-empty: what
    # is shown is that --overwrite lets the run go ahead and its report replaces the earlier one.)
    replaced = run_harness_in_process("run", "--matrix", matrix, "-k", "regression and cuda", "--report-dir",
                                      str(earlier), "--overwrite", "--allow-empty")
    assert replaced.returncode == 0, replaced.stderr
    assert set(cells_by_id(earlier)) == {"regression-cuda2-ddp-fp32"}
