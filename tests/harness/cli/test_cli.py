"""`python -m harness list|run|ci` as a person runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.runner_helpers import REPO_ROOT, cells_by_id, run_harness, write_matrix


def test_list_shows_markers_and_skip_reasons_and_hides_canaries(tmp_path: Path) -> None:
    done = run_harness("list", "--matrix", str(write_matrix(tmp_path)))
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
    canaries = run_harness("list", "--matrix", str(write_matrix(tmp_path)), "-k", "canary")
    assert canaries.stdout.count("canary_") == 3 and "3 cell(s)" in canaries.stdout


def test_run_writes_every_report_and_exits_0_when_nothing_failed(tmp_path: Path) -> None:
    report_dir = tmp_path / "r"
    done = run_harness(
        "run",
        "--matrix",
        str(write_matrix(tmp_path)),
        "-k",
        "cpu1 or cuda",
        "--report-dir",
        str(report_dir),
        "--env-name",
        "deepspeed" if _ds() else "nodeepspeed",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("report.json", "junit.xml", "report.md", "report.html"):
        assert (report_dir / name).stat().st_size > 0
    cells = cells_by_id(report_dir)
    assert cells["regression-cpu1-single-fp32"]["status"] == "passed"
    assert cells["regression-cuda2-ddp-fp32"]["status"] == "skipped"
    assert cells["regression-cpu1-single-fp32"]["environment"] in ("deepspeed", "nodeepspeed")


def test_last_failed_reruns_only_failures(tmp_path: Path) -> None:
    report_dir = tmp_path / "r"
    matrix = str(write_matrix(tmp_path))
    first = run_harness("run", "--matrix", matrix, "-k", "cpu1", "--report-dir", str(report_dir))
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_harness(
        "run",
        "--matrix",
        matrix,
        "-k",
        "cpu1 or canary_nan",
        "--last-failed",
        "--report-dir",
        str(report_dir),
    )
    assert "resume: 1 cell(s) kept" in again.stdout and "1 to run" in again.stdout
    assert again.returncode == 1  # the NaN canary fails
    assert set(cells_by_id(report_dir)) == {"regression-cpu1-single-fp32", "canary_nan-cpu1-single-fp32"}


def test_ci_check_agrees_with_the_committed_workflows() -> None:
    done = run_harness("ci", "--check")
    assert done.returncode == 0, done.stdout + done.stderr


def _ds() -> bool:
    from accelerate_core.imports import is_deepspeed_available

    return is_deepspeed_available()


@pytest.mark.parametrize("reader", ["head -2", "grep -m1 zero3"])
def test_list_behaves_in_a_pipe(reader: str) -> None:
    # The reader stops reading early: no BrokenPipeError traceback, SIGPIPE's status (141).
    command = f"set -o pipefail; {sys.executable} -m harness list | {reader}"
    done = subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.stdout.strip() and done.returncode in (0, 141)


def test_a_run_never_silently_replaces_an_earlier_report(tmp_path: Path) -> None:
    # Without --report-dir: a new folder per run, reports/latest pointing at the newest.
    matrix = write_matrix(tmp_path)
    command = [sys.executable, "-m", "harness", "run", "--matrix", str(matrix), "-k", "regression and cpu1",
               "-q"]
    env = {**os.environ, "CI": "1", "PYTHONPATH": str(REPO_ROOT)}
    first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    runs = sorted((tmp_path / "reports" / "runs").iterdir())
    assert len(runs) == 2 and all((run / "report.json").is_file() for run in runs)
    assert (tmp_path / "reports" / "latest").resolve() == runs[-1].resolve()
    # With --report-dir holding an earlier report: refused (exit 2, report intact) ...
    before = (runs[0] / "report.json").read_text()
    refused = run_harness("run", "--matrix", str(matrix), "-k", "regression and cpu1", "--report-dir",
                          str(runs[0]))
    assert refused.returncode == 2 and "holds the report of an earlier run (1 passed" in refused.stderr
    assert "--overwrite" in refused.stderr and (runs[0] / "report.json").read_text() == before
    # ... unless asked to replace it.
    replaced = run_harness("run", "--matrix", str(matrix), "-k", "regression and cpu1", "--report-dir",
                           str(runs[0]), "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
