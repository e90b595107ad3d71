"""What a run is asked to do (RunOptions) and who hears of its progress (ProgressLike)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harness.judge.outcome import CellResult
from harness.plan.availability import Host
from harness.plan.matrix import Matrix


class ProgressLike(Protocol):
    def cell_started(self, cell_id: str) -> None: ...
    def cell_finished(self, result: CellResult) -> None: ...


@dataclass
class RunOptions:
    report_dir: Path
    timeout_s: float = 120.0  # per cell, from its start; start-up of a launch has its own grace
    isolate: bool = False  # one launch per cell (slow; for comparison and debugging)
    env_name: str = ""  # the environment of matrix.toml this run is in (reports, expectations)
    matrix_path: Path | None = None
    compare_records: Path | None = None  # another environment's report dir: cross-check records
    allow_cpu_fp16_emulation: bool = True
    # CPU launch groups run at the same time, up to this many (0: 2 on a machine with 2+ cores).
    # A 1-process group beside a 2-process one uses the core the first would leave idle; GPU
    # groups always run one after another (they would share devices).
    parallel_launches: int = 0
    host: Host | None = None  # tests inject a host; None = probe this machine
    matrix: Matrix | None = None  # already loaded (saves a re-read); None = load matrix_path
    # Judge the exact tier too (harness.calibrate.exact_judge): a passing cell of it fails unless
    # its record equals the reduction-order reference bit for bit. Opt-in (`run --exact`).
    exact: bool = False
