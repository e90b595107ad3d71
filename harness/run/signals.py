"""Ctrl-C and SIGTERM during a run: stop every launch within seconds, keep what finished.

SIGINT already raises KeyboardInterrupt in the main thread; SIGTERM (what CI runners and
`timeout` send) is made to do the same, so one code path stops launches and writes the partial
report. A second signal while that cleanup runs is ignored: the cleanup is short, and being
interrupted half-way is what would leave processes behind. atexit covers every other exit.
"""

from __future__ import annotations

import atexit
import signal
from types import FrameType

from harness.run.processes import cleanup_all

INTERRUPT_EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}


def _raise(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    raise KeyboardInterrupt(name)


def install() -> None:
    """Turn SIGTERM/SIGHUP into KeyboardInterrupt(name) and clean up launches at exit."""
    signal.signal(signal.SIGINT, _raise)
    signal.signal(signal.SIGTERM, _raise)
    signal.signal(signal.SIGHUP, _raise)
    atexit.register(cleanup_all)


def ignore_further() -> None:
    """During cleanup and the partial report: later signals wait (they would only cut it short)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
