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


class _Forwarding:
    """The signals the launcher received, and the child they go to once it exists."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.child: subprocess.Popen[bytes] | None = None
        self.forwarded = False

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.child is None:
            return  # still starting: `started` passes it on
        if len(self.received) == 1:
            self.forwarded = True
            _signal_tree([self.child.pid], signum)
        else:
            _signal_tree(descendants(os.getpid()), signal.SIGKILL)

    def started(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        if self.received and not self.forwarded:  # it came while the child was being started
            self.forwarded = True
            _signal_tree([child.pid], self.received[0])


@contextmanager
def _forward_signals() -> Iterator[_Forwarding]:
    """While the child runs, pass SIGINT/SIGTERM/SIGHUP on to its process group.

    The child runs in its own session, so a terminal's Ctrl-C reaches only the launcher; it is
    passed on once. A second Ctrl-C means "now": every descendant gets SIGKILL. The handlers are
    in place before the child starts: a signal while it starts is passed on once it exists, never
    raised as KeyboardInterrupt inside subprocess.Popen (which would leave a started child to the
    parent-death signal alone).
    """
    forwarding = _Forwarding()
    previous = {sig: signal.signal(sig, forwarding.on_signal) for sig in _FORWARDED}
    try:
        yield forwarding
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
    reader = None
    with _forward_signals() as forwarding:
        try:
            child = subprocess.Popen(list(command), env=dict(env), start_new_session=True,
                                     stderr=subprocess.PIPE if stderr_sink is not None else None,
                                     preexec_fn=_die_with_launcher(os.getpid()))  # safe: no thread yet
            forwarding.started(child)
            reader = _relay(child.stderr, stderr_sink) if child.stderr is not None and stderr_sink else None
            returncode = child.wait()
        finally:
            started = forwarding.child
            if started is not None and started.poll() is None:  # the launcher itself is failing
                _signal_tree([started.pid], signal.SIGKILL)  # take the run down with it
                started.wait()
            stopped = stop_leftovers()
        if reader is not None:  # every writer is gone now, so the pipe ends
            reader.join(DRAIN_S)
    if stopped:
        print(f"accelerate-core launch: stopped {len(stopped)} process(es) the run left behind",
              file=sys.stderr)
    status = exit_status(returncode)
    if forwarding.received and status == 0:
        status = 128 + forwarding.received[0]  # interrupted: never report success
    return status
