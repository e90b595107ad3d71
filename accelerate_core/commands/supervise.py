"""Run the launched command, pass on Ctrl-C/SIGTERM, and leave no process of the run behind.

Why this is more than `subprocess.run`: torchrun starts every rank in a session of its own, so
killing torchrun's process group does not reach the ranks, and a torchrun killed hard leaves
them orphaned. On Linux the launcher therefore makes itself a *child subreaper*: whatever the
run leaves orphaned is re-parented to the launcher instead of init, where the launcher can find
it (psutil lists this process's descendants) and stop it once the run is over. Signals are
forwarded to the child's process group; torchrun passes them on to every rank and stops siblings
when one rank fails.

With `stderr_sink`, the child's stderr (shared by every rank torchrun starts) comes through a
pipe that a reader thread hands to the sink as it arrives (see rank_errors.py); the thread is
done once the run and whatever it left behind are gone.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import IO

import psutil

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 5.0  # how long stragglers get between SIGTERM and SIGKILL
DRAIN_S = 5.0  # how long the stderr reader may take to finish once no process of the run is left


def become_subreaper() -> bool:
    """Ask Linux to re-parent orphaned descendants to this process. False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _die_with_launcher(launcher_pid: int) -> Callable[[], None] | None:
    """For the child, before exec: SIGTERM me when the launcher dies (even by SIGKILL), so a
    killed launcher still takes torchrun, and through it every rank, down. Linux only."""
    if not sys.platform.startswith("linux"):
        return None

    def arm() -> None:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            return
        if os.getppid() != launcher_pid:  # the launcher died before the line above took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def descendants(root: int) -> list[int]:
    """Pids below `root` in the process tree, zombies included (they still need reaping)."""
    try:
        # One snapshot of every process's parent, walked from `root`; processes that exit while
        # it is taken are skipped by psutil, not raised.
        return [child.pid for child in psutil.Process(root).children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []  # `root` itself is gone, or the platform will not tell


def _signal_tree(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        for kill in (os.killpg, os.kill):  # the pid's group when it leads one, else the pid
            try:
                kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                continue
            break


def _reap_zombies() -> None:
    """Collect exit statuses of re-parented orphans so they do not stay as zombies."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def stop_leftovers(grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM every live descendant of this process, SIGKILL what is left after `grace_s`."""
    me = os.getpid()
    _reap_zombies()
    left = descendants(me)
    if not left:
        return []
    _signal_tree(left, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap_zombies()
        if not descendants(me):
            return left
        time.sleep(0.05)
    _signal_tree(descendants(me), signal.SIGKILL)
    for _ in range(100):
        _reap_zombies()
        if not descendants(me):
            break
        time.sleep(0.05)
    return left


@contextmanager
def _forward_signals(child: subprocess.Popen[bytes]) -> Iterator[list[int]]:
    """While the child runs, pass SIGINT/SIGTERM/SIGHUP on to its process group.

    The child runs in its own session, so a terminal's Ctrl-C reaches only the launcher; it is
    passed on once. A second Ctrl-C means "now": every descendant gets SIGKILL.
    """
    received: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1:
            _signal_tree([child.pid], signum)
        else:
            _signal_tree(descendants(os.getpid()), signal.SIGKILL)

    previous = {sig: signal.signal(sig, handler) for sig in _FORWARDED}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def exit_status(returncode: int) -> int:
    """A shell-style exit status: a child killed by signal N gives 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _relay(stream: IO[bytes], sink: Callable[[bytes], None]) -> threading.Thread:
    """A thread handing everything read from `stream` to `sink` until end of file."""
    def read() -> None:
        fd = stream.fileno()
        try:
            while chunk := os.read(fd, 65536):
                sink(chunk)
        except OSError:
            pass
        finally:
            stream.close()

    thread = threading.Thread(target=read, name="accelerate-core-stderr", daemon=True)
    thread.start()
    return thread


def run_supervised(command: Sequence[str], env: Mapping[str, str],
                   stderr_sink: Callable[[bytes], None] | None = None) -> int:
    """Run `command` to completion; return its exit status. No descendant outlives the call.
    With `stderr_sink`, the child's stderr goes to it (as it comes) instead of this stderr."""
    become_subreaper()
    child = subprocess.Popen(list(command), env=dict(env), start_new_session=True,
                             stderr=subprocess.PIPE if stderr_sink is not None else None,
                             preexec_fn=_die_with_launcher(os.getpid()))  # safe: started before the reader
    reader = _relay(child.stderr, stderr_sink) if child.stderr is not None and stderr_sink else None
    try:
        with _forward_signals(child) as received:
            returncode = child.wait()
    finally:
        if child.poll() is None:  # the launcher itself is failing: take the run down with it
            _signal_tree([child.pid], signal.SIGKILL)
            child.wait()
        stopped = stop_leftovers()
        if reader is not None:  # every writer is gone now, so the pipe ends
            reader.join(DRAIN_S)
    if stopped:
        print(f"accelerate-core launch: stopped {len(stopped)} process(es) the run left behind",
              file=sys.stderr)
    status = exit_status(returncode)
    if received and status == 0:
        status = 128 + received[0]  # interrupted: never report success
    return status
