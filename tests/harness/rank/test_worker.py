"""The worker on its own (one process, no torchrun: rank 0 of 1): the files the parent watches."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from harness.plan.cell import Cell
from harness.rank.worker import EXIT_CELL_ERROR
from harness.record.record_format import Record
from tests.harness.runner_helpers import REPO_ROOT


def run_worker(run_dir: Path, cell_ids: list[str]) -> subprocess.CompletedProcess[str]:
    run_dir.mkdir(parents=True, exist_ok=True)
    plan = {
        "cells": [{"id": i, "cell": asdict(Cell.from_id(i)), "emulated": False} for i in cell_ids],
        "records_dir": str(run_dir / "records"),
    }
    (run_dir / "plan.json").write_text(json.dumps(plan))
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, "-m", "harness.rank.worker", str(run_dir)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_worker_runs_cells_in_order_and_leaves_status_record_pid_and_log(tmp_path: Path) -> None:
    ids = ["regression-cpu1-single-fp32", "regression-cpu1-single-bf16"]
    done = run_worker(tmp_path, ids)
    assert done.returncode == 0, (tmp_path / "logs" / "rank0.log").read_text()[-3000:]
    for cell_id in ids:
        assert json.loads((tmp_path / "status" / f"{cell_id}.started").read_text())["time"] > 0
        assert json.loads((tmp_path / "status" / f"{cell_id}.finished").read_text())["seconds"] > 0
        record = Record.load(tmp_path / "records" / cell_id)
        assert record.task == "regression" and len(record.losses) == 8
    assert int((tmp_path / "pids" / "rank0").read_text()) > 0
    warm_up = json.loads((tmp_path / "status" / "warm_up.json").read_text())  # start-up, apart
    assert warm_up["seconds"] > 0 and "deepspeed_ops_s" not in warm_up  # no DeepSpeed cell: no op built
    log = (tmp_path / "logs" / "rank0.log").read_text()
    assert log.index(f"cell {ids[0]} starts") < log.index(f"cell {ids[1]} starts")
    assert done.stdout == ""  # everything went to the rank's log, at the fd level


def test_worker_exception_writes_traceback_and_ends_the_launch(tmp_path: Path) -> None:
    done = run_worker(tmp_path, ["nosuchtask-cpu1-single-fp32", "regression-cpu1-single-fp32"])
    assert done.returncode == EXIT_CELL_ERROR
    error = (tmp_path / "status" / "nosuchtask-cpu1-single-fp32.error.rank0").read_text()
    assert "Traceback" in error and "'nosuchtask': no such task" in error
    assert not (tmp_path / "status" / "nosuchtask-cpu1-single-fp32.finished").exists()
    assert not (
        tmp_path / "status" / "regression-cpu1-single-fp32.started"
    ).exists()  # left to a fresh launch
