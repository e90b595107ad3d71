"""No process left behind: every launch's pids, found exactly, and killed for good.

The launcher runs in its own session (start_new_session) and each rank in another one (torchrun
does that), so cleanup never relies on a process group: it signals the exact pids, found from the
ranks' pid files and the launcher's process tree (psutil), then the launcher.
"""

from __future__ import annotations

import contextlib
import subprocess

import psutil

from harness.layout.launch_dir import LaunchDir

# Launchers not yet reaped, killed by cleanup_all (atexit, SIGINT/SIGTERM). Popen objects, not
# bare pids: a reaped pid may be recycled by an unrelated process, which we must never signal.
_live: dict[int, subprocess.Popen[bytes]] = {}


def rank_pids(launch: LaunchDir) -> list[int]:
    pids = []
    for path in launch.pid_files():
        try:
            pids.append(int(path.read_text()))
        except (OSError, ValueError):
            continue
    return pids


def kill_tree(launcher_pid: int, launch: LaunchDir | None = None) -> None:
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
    for pid in rank_pids(launch) if launch else []:
        try:
            proc = psutil.Process(pid)
            if "harness.rank.worker" in " ".join(proc.cmdline()):  # never a recycled pid of someone else
                procs[pid] = proc
                procs.update({p.pid: p for p in proc.children(recursive=True)})
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for proc in procs.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(list(procs.values()), timeout=10)


def stop(proc: subprocess.Popen[bytes], launch: LaunchDir | None) -> None:
    """End a launch for good: its tree while the launcher is unreaped, and any rank left over."""
    if proc.poll() is None:
        kill_tree(proc.pid, launch)
        proc.wait()
    elif launch is not None:
        kill_tree(-1, launch)
    _live.pop(proc.pid, None)


def register(proc: subprocess.Popen[bytes]) -> None:
    """Track a launcher until `stop` reaps it."""
    _live[proc.pid] = proc


def cleanup_all() -> None:
    """Kill every launch still running (atexit, SIGINT/SIGTERM): no process is left behind."""
    for proc in list(_live.values()):
        stop(proc, None)
