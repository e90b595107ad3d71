"""Shared by the runner, CLI and fault tests: a small matrix file, a CLI run in a subprocess,
and the check that no process of a run is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from harness.paths import MATRIX_PATH

REPO_ROOT = Path(__file__).resolve().parents[2]

# A small real matrix: the `regression` task (its goldens are checked in) on one process and on
# two with DDP, in fp32 only (the fastest cells), plus the canaries as opt-in cells.
SMALL_MATRIX = """
[axes]
task = ["regression"]
device = ["cpu", "cuda"]
strategy = ["single", "ddp"]
precision = ["fp32"]

[[shapes]]
device = "cpu"
processes = 1
strategies = ["single"]

[[shapes]]
device = "cpu"
processes = 2
strategies = ["ddp"]

[[shapes]]
device = "cuda"
processes = 2
strategies = ["ddp"]

[[include]]
ids = ["canary_crash-cpu2-ddp-fp32", "canary_hang-cpu2-ddp-fp32", "canary_nan-cpu1-single-fp32"]
opt_in = "canary"
reason = "fault canaries: only when named with -k canary"
"""


# The repository's tolerance table: a matrix file carries its own (the run judges with them).
_TOLERANCES = MATRIX_PATH.read_text()[MATRIX_PATH.read_text().index("[tolerances]"):]


def write_matrix(directory: Path, text: str = SMALL_MATRIX, extra: str = "") -> Path:
    path = directory / "matrix.toml"
    tolerances = "" if "[tolerances" in text + extra else "\n" + _TOLERANCES
    path.write_text(text + extra + tolerances, encoding="utf-8")
    return path


def harness_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def run_harness(
    *args: str, timeout: float = 240.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m harness ARGS` from the repo root; the output comes back as text."""
    full_env = {**os.environ, **(env or {}), "CI": "1"}  # CI=1: plain progress lines, no live bar
    return subprocess.run(
        harness_cmd(*args), cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, env=full_env
    )


def processes_mentioning(marker: str) -> list[psutil.Process]:
    """Live processes whose command line contains `marker` (e.g. a test's unique tmp dir): a
    launch's torchrun and ranks carry the run's report dir in their arguments."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if marker in cmdline and proc.pid != os.getpid():
            found.append(proc)
    return found


def assert_no_leftovers(marker: str, wait_s: float = 5.0) -> None:
    """No process of the run remains (after a short grace for exits already under way)."""
    deadline = time.monotonic() + wait_s
    left = processes_mentioning(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes left behind: {[(p.pid, ' '.join(p.cmdline())) for p in left]}"


def report(report_dir: Path) -> dict[str, Any]:
    return json.loads((report_dir / "report.json").read_text(encoding="utf-8"))


def cells_by_id(report_dir: Path) -> dict[str, dict[str, Any]]:
    return {cell["id"]: cell for cell in report(report_dir)["cells"]}


# What a real one-process CPU run records about itself (harness.rank.evidence); a golden copied
# as a cell's record needs it, since the judge checks evidence before numbers.
SINGLE_CPU_EVIDENCE = {"strategy": "single", "strategy_class": "SingleDeviceStrategy",
                       "world_size": 1, "device": "cpu", "emulated": False,
                       "random_draws": {"steps": 16, "drawing": 0, "generators": ""}}


def golden_as_record(golden_stem: Path, record_stem: Path) -> None:
    """A checked-in golden (a task without a Linear layer) saved as a cpu1 single cell's record."""
    from harness.truth.record import Record

    record = Record.load(golden_stem)
    record.meta = {"evidence": dict(SINGLE_CPU_EVIDENCE)}
    record.save(record_stem)
