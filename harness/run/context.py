"""The state one run shares between its launch threads, the confirmation of failures
(harness.run.confirm) and the resume cells (harness.run.resume_launches): the options, the results so far,
whether the run is stopping, and the start-up and time of every launch.

Callers hand their own callbacks to the launch loop (harness.run.launch_loop); their types are
named here, so that every module that launches cells says the same thing with them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.judge.cell_verdict import apply_expected
from harness.judge.outcome import CellResult
from harness.layout.report_dir import ReportDir
from harness.plan.cell import Cell
from harness.plan.matrix import Matrix
from harness.run.deepspeed_ops import ensure_deepspeed_ops
from harness.run.options import ProgressLike, RunOptions
from harness.run.profile import RunClock
from harness.run.startup import StartupSummary
from harness.run.torchrun_launch import launch_env

# A cell finished: judge it (cell id, seconds); False ends its launch there.
OnJudged = Callable[[str, float], bool]
# A cell ended its launch (raised, crashed or hung): its result.
OnBroken = Callable[[Cell, CellResult], None]
# A launch is about to start: its cells and its directory.
OnLaunch = Callable[[list[Cell], Path], None]


@dataclass
class RunContext:
    options: RunOptions
    matrix: Matrix
    progress: ProgressLike | None
    emulated: dict[str, bool] = field(default_factory=dict)
    results: dict[str, CellResult] = field(default_factory=dict)
    stopping: bool = False  # set on SIGINT/SIGTERM: launch threads stop, late results are dropped
    launches: list[dict[str, object]] = field(default_factory=list)  # start-up time of each
    ops_lock: threading.Lock = field(default_factory=threading.Lock)
    ops_done: bool = False  # DeepSpeed's CPU op is built (or its build was tried) in this run
    clock: RunClock = field(default_factory=RunClock)  # where the run's time went (--profile)

    @property
    def layout(self) -> ReportDir:
        return ReportDir(self.options.report_dir)

    @property
    def records_dir(self) -> Path:
        return self.layout.records

    def ensure_deepspeed_ops(self, group: list[Cell]) -> None:
        """Before the first launch of DeepSpeed CPU cells: build DeepSpeed's comm op, once."""
        if not any(c.is_deepspeed and c.device == "cpu" for c in group):
            return
        with self.ops_lock:  # the other launch threads wait here rather than build it twice
            if not self.ops_done:
                self.launches.append(ensure_deepspeed_ops(launch_env(group[0])))
                self.ops_done = True

    def finish(self, cell: Cell, result: CellResult) -> None:
        """A cell's final result, with the outcome matrix.toml expects of it applied."""
        if self.stopping:  # a cell cut short by the interrupt is not a result: --resume reruns it
            return
        expected = self.matrix.expected_outcome(cell, self.options.env_name)
        result.environment = self.options.env_name
        self.results[cell.id] = apply_expected(result, expected)
        if self.progress is not None:
            self.progress.cell_finished(self.results[cell.id])

    def started(self, cell_id: str) -> None:
        if self.progress is not None:
            self.progress.cell_started(cell_id)

    def startup(self) -> StartupSummary | None:
        """The launches' start-up and the run's profile; None when nothing was launched."""
        return StartupSummary(list(self.launches), self.clock.summary()) if self.launches else None
