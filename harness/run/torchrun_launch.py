"""One `torch.distributed.run` launch of a list of cells, watched from the parent.

Rendezvous: `--standalone` makes torchrun bind its c10d store to port 0 (the OS picks a free
port, held open for the whole launch) and the workers share that store, so two launches, also
from parallel pytest-xdist workers, never race for a port.

Cleanup (harness.run.processes) signals exact pids; evidence (harness.run.crash_evidence) reads what the ranks
left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.layout.launch_dir import LaunchDir
from harness.plan.cell import Cell
from harness.run.crash_evidence import crash_detail, dead_ranks, read_text, wait_for_stacks
from harness.run.processes import kill_tree, rank_pids, register, stop
from harness.tasks.registry import import_paths_of

POLL_S = 0.05
STACK_WAIT_S = 3.0  # how long ranks get to write their stacks after SIGUSR1
STARTUP_GRACE_S = 120.0  # imports + process group + first deepspeed.initialize, before cell 1


@dataclass
class LaunchOutcome:
    finished: dict[str, float] = field(default_factory=dict)  # cell id -> seconds, in order
    # The cell that was running when the launch ended badly, and how it ended.
    broken_cell: str | None = None
    broken_status: str = ""  # "crashed" | "timeout" | "exception"
    broken_seconds: float = 0.0  # from the broken cell's start (or the launch's) to its end
    detail: str = ""
    not_started: list[Cell] = field(default_factory=list)
    # Start-up: from the launch to its first cell's start (imports, process group, DeepSpeed's
    # one-off op build), and what the ranks' warm-up measured (LaunchDir.warm_up).
    startup_s: float | None = None
    warm_up: dict[str, float] = field(default_factory=dict)
    # Where each finished cell's time went on rank 0 (harness.rank.phases), and the launch's
    # whole wall time, start-up and shutdown included: the run's profile (harness.run.profile).
    phases: dict[str, dict[str, float]] = field(default_factory=dict)
    wall_s: float = 0.0


# Runs first in the launcher process: ask Linux to SIGTERM it when the runner dies, even by
# SIGKILL (PR_SET_PDEATHSIG survives the exec), then become torchrun. torchrun stops its ranks on
# SIGTERM, and each rank also exits when its launcher goes. (A preexec_fn would do the same, but
# is unsafe with the runner's launch threads.)
_BOOTSTRAP = (
    "import ctypes, os, runpy, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG\n"
    "except (OSError, AttributeError):\n"
    "    pass  # not Linux: atexit and signal cleanup still apply\n"
    "if os.getppid() != int(sys.argv.pop(1)):\n"
    "    sys.exit('harness launcher: the runner is gone')\n"
    "sys.argv[0] = 'torch.distributed.run'\n"
    "runpy.run_module('torch.distributed.run', run_name='__main__', alter_sys=True)\n"
)


def command(processes: int, launch: LaunchDir) -> list[str]:
    return [
        sys.executable,
        "-c",
        _BOOTSTRAP,
        str(os.getpid()),
        "--standalone",
        f"--nproc-per-node={processes}",
        "--max-restarts=0",
        "--monitor-interval=0.1",
        "-m",
        "harness.rank.worker",
        str(launch.root),
    ]


def launch_env(cell: Cell) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
    if cell.device == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_launch(
    cells: list[Cell],
    emulated: dict[str, bool],
    launch: LaunchDir,
    records_dir: Path,
    timeout_s: float,
    on_started: Callable[[str], None],
    on_finished: Callable[[str, float], bool],
    should_stop: Callable[[], bool] = lambda: False,
) -> LaunchOutcome:
    """Run `cells` (one launch shape) in one launch until all finish or one breaks it.

    `on_finished(cell_id, seconds)` judges a finished cell; returning False ends the launch there
    (the cells after it are returned in `not_started`, to run in a fresh launch). A cell that
    raised, crashed or hung ends the launch too: its processes exited or were stopped."""
    launch.create()
    plan = {
        # The cell whole (its axes), and its id only to name its files and for a reader.
        "cells": [{"id": c.id, "cell": asdict(c), "emulated": emulated.get(c.id, False)} for c in cells],
        "records_dir": str(records_dir),
        # Import paths of a user's tasks (as matrix.toml named them, remembered by the registry
        # when the parent imported them): every rank imports them before building a task.
        "task_imports": import_paths_of([c.task for c in cells]),
    }
    launch.write_plan(plan)
    with open(launch.launcher_log, "wb") as log:
        proc = subprocess.Popen(
            command(cells[0].processes, launch),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=launch_env(cells[0]),
            start_new_session=True,
            cwd=os.getcwd(),
        )
    register(proc)
    outcome = LaunchOutcome()
    started: dict[str, float] = {}
    launch_start = time.monotonic()
    try:
        keep_going = True
        while keep_going and not should_stop():
            for cell in cells:
                if cell.id not in started and launch.started(cell.id).exists():
                    started[cell.id] = time.monotonic()
                    if outcome.startup_s is None:
                        outcome.startup_s = round(started[cell.id] - launch_start, 3)
                    on_started(cell.id)
                done = launch.finished(cell.id)
                if cell.id not in outcome.finished and done.exists():
                    finished = json.loads(done.read_text())
                    seconds = float(finished["seconds"])
                    outcome.finished[cell.id] = seconds
                    outcome.phases[cell.id] = dict(finished.get("phases", {}))
                    if not on_finished(cell.id, seconds):
                        keep_going = False
                        break
            if len(outcome.finished) == len(cells) or not keep_going:
                break
            running = next((c for c in cells if c.id in started and c.id not in outcome.finished), None)
            now = time.monotonic()
            if running is not None and now - started[running.id] > timeout_s:
                _on_timeout(proc, launch, outcome, running, timeout_s)
                break
            if running is None and now - launch_start > timeout_s + STARTUP_GRACE_S:
                first = next(c for c in cells if c.id not in outcome.finished)
                _on_timeout(proc, launch, outcome, first, timeout_s + STARTUP_GRACE_S)
                break
            if proc.poll() is not None:
                time.sleep(0.2)  # a status file may land just before the exit; read once more
                if any(
                    launch.finished(c.id).exists() and c.id not in outcome.finished for c in cells
                ):
                    continue
                _on_exit(proc, launch, outcome, cells, started)
                break
            time.sleep(POLL_S)
        if len(outcome.finished) == len(cells) and not should_stop():  # let it exit on its own
            with contextlib.suppress(subprocess.TimeoutExpired):  # a rank stuck in teardown: killed below
                proc.wait(timeout=30)
    finally:
        stop(proc, launch)
    if outcome.broken_cell is not None:
        outcome.broken_seconds = time.monotonic() - started.get(outcome.broken_cell, launch_start)
    with contextlib.suppress(OSError, ValueError):
        outcome.warm_up = dict(json.loads(launch.warm_up.read_text(encoding="utf-8")))
    done_ids = set(outcome.finished) | {outcome.broken_cell}
    outcome.not_started = [c for c in cells if c.id not in done_ids]
    outcome.wall_s = round(time.monotonic() - launch_start, 3)
    return outcome


def _on_timeout(
    proc: subprocess.Popen[bytes], launch: LaunchDir, outcome: LaunchOutcome, cell: Cell, limit: float
) -> None:
    for pid in rank_pids(launch):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR1)
    stacks = wait_for_stacks(launch, STACK_WAIT_S)
    kill_tree(proc.pid, launch)
    outcome.broken_cell, outcome.broken_status = cell.id, "timeout"
    outcome.detail = f"no result within {limit:.0f} s; Python stacks of every rank:\n\n{stacks}"


def _on_exit(
    proc: subprocess.Popen[bytes],
    launch: LaunchDir,
    outcome: LaunchOutcome,
    cells: list[Cell],
    started: dict[str, float],
) -> None:
    pending = [c for c in cells if c.id not in outcome.finished]
    running = next((c for c in pending if c.id in started), pending[0])
    errors = {rank: read_text(path) for rank, path in launch.errors(running.id).items()}
    error_text = "\n".join(f"--- exception on rank {r} ---\n{text}" for r, text in sorted(errors.items()))
    dead = dead_ranks(read_text(launch.launcher_log))
    # A rank that died without writing its exception crashed (killed, os._exit, segfault); the
    # others then fail in their collectives, which is a consequence, not the cause.
    if any(r not in errors for r in dead) or not errors:
        outcome.broken_status = "crashed"
        silent = {r: c for r, c in dead.items() if r not in errors}
        outcome.detail = crash_detail(launch, proc.returncode, silent) + (
            "\n" + error_text if errors else ""
        )
    else:
        outcome.broken_status = "exception"
        outcome.detail = error_text
    outcome.broken_cell = running.id
