"""One `torch.distributed.run` launch of a list of cells, watched from the parent.

Rendezvous: `--standalone` makes torchrun bind its c10d store to port 0 (the OS picks a free
port, held open for the whole launch) and the workers share that store, so two launches, also
from parallel pytest-xdist workers, never race for a port.

The launcher runs in its own session (start_new_session) and each rank in another one (torchrun
does that), so cleanup never relies on a process group: it signals the exact pids, found from the
ranks' pid files and the launcher's process tree (psutil), then the launcher.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from harness.cells import Cell

POLL_S = 0.05
STACK_WAIT_S = 3.0  # how long ranks get to write their stacks after SIGUSR1
STARTUP_GRACE_S = 120.0  # imports + process group + first deepspeed.initialize, before cell 1


@dataclass
class LaunchOutcome:
    finished: dict[str, float] = field(default_factory=dict)  # cell id -> seconds, in order
    # The cell that was running when the launch ended badly, and how it ended.
    broken_cell: str | None = None
    broken_status: str = ""  # "crashed" | "timeout" | "error"
    broken_seconds: float = 0.0  # from the broken cell's start (or the launch's) to its end
    detail: str = ""
    not_started: list[Cell] = field(default_factory=list)


# Launchers not yet reaped, killed by cleanup_all (atexit, SIGINT/SIGTERM). Popen objects, not
# bare pids: a reaped pid may be recycled by an unrelated process, which we must never signal.
_live: dict[int, subprocess.Popen[bytes]] = {}


def command(processes: int, run_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={processes}",
        "--max-restarts=0",
        "--monitor-interval=0.1",
        "-m",
        "harness.worker",
        str(run_dir),
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
    run_dir: Path,
    records_dir: Path,
    timeout_s: float,
    on_started: Callable[[str], None],
    on_finished: Callable[[str, float], bool],
) -> LaunchOutcome:
    """Run `cells` (one launch shape) in one launch until all finish or one breaks it.

    `on_finished(cell_id, seconds)` judges a finished cell; returning False ends the launch there
    (the cells after it are returned in `not_started`, to run in a fresh launch)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for sub in ("pids", "logs", "stacks", "status"):
        (run_dir / sub).mkdir(exist_ok=True)
    plan = {
        "cells": [{"id": c.id, "emulated": emulated.get(c.id, False)} for c in cells],
        "records_dir": str(records_dir),
    }
    (run_dir / "plan.json").write_text(json.dumps(plan, indent=1), encoding="utf-8")
    status = run_dir / "status"
    with open(run_dir / "launcher.log", "wb") as log:
        proc = subprocess.Popen(
            command(cells[0].processes, run_dir),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=launch_env(cells[0]),
            start_new_session=True,
            cwd=os.getcwd(),
        )
    _live[proc.pid] = proc
    outcome = LaunchOutcome()
    started: dict[str, float] = {}
    launch_start = time.monotonic()
    try:
        keep_going = True
        while keep_going:
            for cell in cells:
                if cell.id not in started and (status / f"{cell.id}.started").exists():
                    started[cell.id] = time.monotonic()
                    on_started(cell.id)
                done = status / f"{cell.id}.finished"
                if cell.id not in outcome.finished and done.exists():
                    seconds = float(json.loads(done.read_text())["seconds"])
                    outcome.finished[cell.id] = seconds
                    if not on_finished(cell.id, seconds):
                        keep_going = False
                        break
            if len(outcome.finished) == len(cells) or not keep_going:
                break
            running = next((c for c in cells if c.id in started and c.id not in outcome.finished), None)
            now = time.monotonic()
            if running is not None and now - started[running.id] > timeout_s:
                _on_timeout(proc, run_dir, outcome, running, timeout_s)
                break
            if running is None and now - launch_start > timeout_s + STARTUP_GRACE_S:
                first = next(c for c in cells if c.id not in outcome.finished)
                _on_timeout(proc, run_dir, outcome, first, timeout_s + STARTUP_GRACE_S)
                break
            if proc.poll() is not None:
                time.sleep(0.2)  # a status file may land just before the exit; read once more
                if any(
                    (status / f"{c.id}.finished").exists() and c.id not in outcome.finished for c in cells
                ):
                    continue
                _on_exit(proc, run_dir, outcome, cells, started)
                break
            time.sleep(POLL_S)
        with contextlib.suppress(subprocess.TimeoutExpired):  # a rank stuck in teardown: killed below
            proc.wait(timeout=30)
    finally:
        stop(proc, run_dir)
    if outcome.broken_cell is not None:
        outcome.broken_seconds = time.monotonic() - started.get(outcome.broken_cell, launch_start)
    done_ids = set(outcome.finished) | {outcome.broken_cell}
    outcome.not_started = [c for c in cells if c.id not in done_ids]
    return outcome


def _on_timeout(
    proc: subprocess.Popen[bytes], run_dir: Path, outcome: LaunchOutcome, cell: Cell, limit: float
) -> None:
    for pid in _rank_pids(run_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR1)
    stacks = _wait_for_stacks(run_dir, STACK_WAIT_S)
    kill_tree(proc.pid, run_dir)
    outcome.broken_cell, outcome.broken_status = cell.id, "timeout"
    outcome.detail = f"no result within {limit:.0f} s; Python stacks of every rank:\n\n{stacks}"


def _on_exit(
    proc: subprocess.Popen[bytes],
    run_dir: Path,
    outcome: LaunchOutcome,
    cells: list[Cell],
    started: dict[str, float],
) -> None:
    status = run_dir / "status"
    pending = [c for c in cells if c.id not in outcome.finished]
    running = next((c for c in pending if c.id in started), pending[0])
    errors = {int(e.name.rsplit("rank", 1)[1]): _read(e) for e in status.glob(f"{running.id}.error.rank*")}
    error_text = "\n".join(f"--- exception on rank {r} ---\n{text}" for r, text in sorted(errors.items()))
    dead = _dead_ranks(_read(run_dir / "launcher.log"))
    # A rank that died without writing its exception crashed (killed, os._exit, segfault); the
    # others then fail in their collectives, which is a consequence, not the cause.
    if any(r not in errors for r in dead) or not errors:
        outcome.broken_status = "crashed"
        silent = {r: c for r, c in dead.items() if r not in errors}
        outcome.detail = crash_detail(run_dir, proc.returncode, silent) + (
            "\n" + error_text if errors else ""
        )
    else:
        outcome.broken_status = "error"
        outcome.detail = error_text
    outcome.broken_cell = running.id


def crash_detail(run_dir: Path, returncode: int | None, dead: dict[int, int], lines: int = 40) -> str:
    """Which rank died (from torchrun's failure summary) and the tail of that rank's output."""
    launcher = _read(run_dir / "launcher.log")
    logs = sorted((run_dir / "logs").glob("rank*.log"))
    chosen = [p for p in logs if int(p.stem[4:]) in dead] or logs
    who = ", ".join(f"rank {r} died ({describe_exit(c)})" for r, c in sorted(dead.items()))
    parts = [
        (who or "a rank died (which one, the launcher did not say)") + f"; launch exit code {returncode}"
    ]
    for path in chosen:
        tail = "\n".join(_read(path).splitlines()[-lines:])
        parts.append(f"--- tail of {path.stem} output ---\n{tail}")
    parts.append("--- tail of launcher output ---\n" + "\n".join(launcher.splitlines()[-15:]))
    return "\n".join(parts)


def _dead_ranks(launcher_log: str) -> dict[int, int]:
    """rank -> exit code of ranks that died on their own (torchrun's failure summary:
    "rank      : 1 (local_rank: 1)" then "exitcode  : 13 (pid: ...)")."""
    ranks = {}
    for match in re.finditer(r"rank\s*:\s*(\d+)\s*\(local_rank.*?\n\s*exitcode\s*:\s*(-?\d+)", launcher_log):
        if match.group(2) not in ("0", "-15"):  # -15: stopped by torchrun after another rank died
            ranks[int(match.group(1))] = int(match.group(2))
    return ranks


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _rank_pids(run_dir: Path) -> list[int]:
    pids = []
    for path in (run_dir / "pids").glob("rank*"):
        try:
            pids.append(int(path.read_text()))
        except (OSError, ValueError):
            continue
    return pids


def _wait_for_stacks(run_dir: Path, wait_s: float) -> str:
    deadline = time.monotonic() + wait_s
    expected = len(_rank_pids(run_dir))
    while time.monotonic() < deadline:
        files = sorted((run_dir / "stacks").glob("rank*.txt"))
        if expected and sum(1 for f in files if f.stat().st_size > 0) >= expected:
            time.sleep(0.2)  # let the dumps complete
            break
        time.sleep(0.1)
    files = sorted((run_dir / "stacks").glob("rank*.txt"))
    return "\n".join(f"--- {f.stem} ---\n{_read(f)}" for f in files) or "(no rank wrote its stack)"


def kill_tree(launcher_pid: int, run_dir: Path | None = None) -> None:
    """SIGKILL the launcher, every descendant and every rank that wrote a pid file; wait for them."""
    procs: dict[int, psutil.Process] = {}
    try:
        root = psutil.Process(launcher_pid) if launcher_pid > 0 else None
        if root is None:
            raise psutil.NoSuchProcess(launcher_pid)
        procs[root.pid] = root
        procs.update({p.pid: p for p in root.children(recursive=True)})
    except psutil.NoSuchProcess:
        pass
    for pid in _rank_pids(run_dir) if run_dir else []:
        try:
            proc = psutil.Process(pid)
            if "harness.worker" in " ".join(proc.cmdline()):  # never a recycled pid of someone else
                procs[pid] = proc
                procs.update({p.pid: p for p in proc.children(recursive=True)})
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for proc in procs.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(list(procs.values()), timeout=10)


def stop(proc: subprocess.Popen[bytes], run_dir: Path | None) -> None:
    """End a launch for good: its tree while the launcher is unreaped, and any rank left over."""
    if proc.poll() is None:
        kill_tree(proc.pid, run_dir)
        proc.wait()
    elif run_dir is not None:
        kill_tree(-1, run_dir)
    _live.pop(proc.pid, None)


def cleanup_all() -> None:
    """Kill every launch still running (atexit, SIGINT/SIGTERM): no process is left behind."""
    for proc in list(_live.values()):
        stop(proc, None)
