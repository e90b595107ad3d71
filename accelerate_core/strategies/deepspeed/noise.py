"""Known, harmless output of DeepSpeed 0.19.8 with torch 2.13: shown once per run, not per step.

A 2-process ZeRO-3 bf16 run of examples/train.py printed 107 lines, 104 of them two torch
FutureWarnings (two lines each, on every gather and reduce-scatter of every step, on every rank),
and DeepSpeed's "op built successfully" line once per rank. Each entry below is one exact message
(and category) with the reason it is harmless; the main process shows it once, the other ranks
not at all (it is the same line again). Nothing else is touched: every other warning and line,
among them any the user can act on, shows as before. Installed by the DeepSpeed strategy only, so
importing accelerate_core changes nothing. Nothing here imports deepspeed.
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings
from collections.abc import Iterator
from typing import TextIO

# torch 2.13 deprecated these two collectives (typing_extensions.deprecated on the functions: a
# warning on every call). DeepSpeed's ZeRO engine calls them for its parameter gathers and
# gradient reduce-scatters; they still work, and the calls are inside DeepSpeed, not in anything
# the user wrote or configured, so there is nothing for the user to do about them.
KNOWN_FUTURE_WARNINGS: tuple[str, ...] = (
    "`torch.distributed.all_gather_into_tensor` is deprecated. "
    "Please use `torch.distributed.all_gather_single` instead.",
    "`torch.distributed.reduce_scatter_tensor` is deprecated. "
    "Please use `torch.distributed.reduce_scatter_single` instead.",
)

# print()ed (not logged) by deepspeed.comm's TorchBackend in every process, when it loads its
# CPU shared-memory collective op, also when the op comes from the build cache: information,
# not a problem. A failed build is a different line (an exception), and is not filtered.
KNOWN_STDOUT_LINES: tuple[str, ...] = (
    "DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully",
)


def show_known_warnings_once(main_process: bool) -> None:
    """Show each known FutureWarning once, from the main process; repeats and other ranks' copies
    are not displayed.

    Why not `warnings.filterwarnings("once", ...)`: measured, it still showed the warnings on every
    step. CPython's C `warn_explicit` keeps "once" (like "default") in the calling module's
    registry, and every change of the filters clears those registries; DeepSpeed's CPU accelerator
    runs `numactl --hardware` in a subprocess on each `device_count()` call (every step), and
    `subprocess` -> `os.get_exec_path` enters `warnings.catch_warnings`, a change of the filters.
    So the display step is where "once" can hold: `warnings.showwarning` is the hook Python
    documents for replacing how warnings are shown. The wrapper drops only repeats of the exact
    known (message, category) pairs and passes everything else, unchanged, to the function it
    replaced. Filters are left alone, so `-W error` or a user's own filter still decide first
    (an "error" still raises on every rank). Installing it again does not add a second wrapper.
    """
    previous = warnings.showwarning
    if getattr(previous, _MARK, None) is not None:
        getattr(previous, _MARK).main_process = main_process
        return
    state = _Shown(main_process)

    def showwarning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                    file: TextIO | None = None, line: str | None = None) -> None:
        if state.drop(str(message), category):
            return
        previous(message, category, filename, lineno, file, line)

    setattr(showwarning, _MARK, state)
    warnings.showwarning = showwarning


_MARK = "_accelerate_core_known_warnings"


class _Shown:
    """Which known warnings this process has shown (one wrapper's memory)."""

    def __init__(self, main_process: bool) -> None:
        self.main_process = main_process
        self.shown: set[str] = set()

    def drop(self, text: str, category: type[Warning]) -> bool:
        if text not in KNOWN_FUTURE_WARNINGS or not issubclass(category, FutureWarning):
            return False
        if not self.main_process or text in self.shown:
            return True
        self.shown.add(text)
        return False


class _LineFilter(io.TextIOBase):
    """A text stream passing every line to `target` except the known ones (or all of them)."""

    def __init__(self, target: TextIO, drop: tuple[str, ...]) -> None:
        super().__init__()
        self._target = target
        self._drop = drop
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        passed = "".join(line + "\n" for line in lines if line.rstrip("\r") not in self._drop)
        if passed:
            self._target.write(passed)
        return len(text)

    def flush(self) -> None:
        self._target.flush()

    def release(self) -> None:
        """Pass on an unfinished last line as it is."""
        if self._pending and self._pending not in self._drop:
            self._target.write(self._pending)
        self._pending = ""
        self._target.flush()


@contextlib.contextmanager
def known_lines_once(main_process: bool) -> Iterator[None]:
    """Around a DeepSpeed call that print()s a known line once per process: the main process
    prints it, the other ranks do not. Every other line goes to stdout as it comes."""
    if main_process:
        yield
        return
    target = sys.stdout
    filtered = _LineFilter(target, KNOWN_STDOUT_LINES)
    try:
        with contextlib.redirect_stdout(filtered):
            yield
    finally:
        filtered.release()
