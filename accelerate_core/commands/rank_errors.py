"""After a failed launch on several processes: the error a rank raised ends the output, once.

When a rank raises an AccelerateCoreError (a conflict, a bad setting), every rank prints the same
traceback and torchrun then prints a 25-line "FAILED / Root Cause" block, so the message the user
can act on scrolls away under a summary that only says "exitcode: 1". The launcher therefore
passes torchrun's stderr (which the ranks share) through as it comes while remembering the last
line of every accelerate_core error traceback in it; torchrun_entry writes its summary to a file
instead of printing it. At the end, `report` prints that summary: shortened to one line, followed
by each distinct error once as the last lines, when a rank raised one; in full, as before, when
none did.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from accelerate_core.errors import AccelerateCoreError

# The last line of a traceback: `accelerate_core.errors.ConflictingSettingsError: <message>`.
_ERROR_LINE = re.compile(r"(accelerate_core(?:\.\w+)*)\.(\w+): (.+)")
_LONGEST_LINE = 1 << 20  # a line longer than this is passed on but not kept for scanning
_MOST_ERRORS = 16  # distinct errors kept for the end of the output


@dataclass(frozen=True)
class RankError:
    kind: str  # the exception class, e.g. ConflictingSettingsError
    message: str


class ErrorWatch:
    """Passes bytes on to `out` as they come and remembers the AccelerateCoreErrors whose
    traceback lines go by (each distinct one once, in order). Fed from one reader thread."""

    def __init__(self, out: TextIO | None = None) -> None:
        self._out = out if out is not None else sys.stderr
        self._partial = b""
        self._lock = threading.Lock()
        self._seen: list[tuple[str, RankError]] = []  # (module, error), checked in `errors`
        self._write_failed = False

    def feed(self, chunk: bytes) -> None:
        self._pass_on(chunk)
        with self._lock:
            lines = (self._partial + chunk).split(b"\n")
            self._partial = lines.pop()
            if len(self._partial) > _LONGEST_LINE:
                self._partial = b""
            for line in lines:
                self._scan(line)

    def close(self) -> None:
        """The stream ended: scan an unfinished last line."""
        with self._lock:
            if self._partial:
                self._scan(self._partial)
                self._partial = b""

    @property
    def errors(self) -> list[RankError]:
        """The distinct AccelerateCoreErrors seen, in order (checked here, not while reading)."""
        with self._lock:
            seen = list(self._seen)
        return [error for module, error in seen if _is_core_error(module, error.kind)]

    def _pass_on(self, chunk: bytes) -> None:
        if self._write_failed:
            return  # keep reading (the ranks must not block on a full pipe), stop writing
        try:
            buffer = getattr(self._out, "buffer", None)
            if buffer is not None:
                self._out.flush()
                buffer.write(chunk)
                buffer.flush()
            else:
                self._out.write(chunk.decode("utf-8", "replace"))
                self._out.flush()
        except (OSError, ValueError):
            self._write_failed = True  # the reader went away (a closed pipe): drain silently

    def _scan(self, raw: bytes) -> None:
        if not raw.startswith(b"accelerate_core."):
            return
        found = _ERROR_LINE.fullmatch(raw.decode("utf-8", "replace").rstrip("\r"))
        if found is None:
            return
        entry = (found.group(1), RankError(found.group(2), found.group(3).strip()))
        if entry not in self._seen and len(self._seen) < _MOST_ERRORS:  # each rank prints it
            self._seen.append(entry)


def _is_core_error(module: str, name: str) -> bool:
    """True when module.name is an AccelerateCoreError (not any line that looks like one)."""
    try:
        cls = getattr(importlib.import_module(module), name, None)
    except Exception:  # a name that does not import is not one of ours
        return False
    return isinstance(cls, type) and issubclass(cls, AccelerateCoreError)


def report(summary_file: Path, errors: list[RankError], out: TextIO | None = None) -> None:
    """Print torchrun's failure summary (when it wrote one) and, last, the ranks' errors."""
    out = out if out is not None else sys.stderr
    summary: dict[str, str] = {}
    try:
        loaded = json.loads(summary_file.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            summary = {k: v for k, v in loaded.items() if isinstance(v, str)}
    except (OSError, ValueError):
        pass  # torchrun ended another way (a signal, a rendezvous error): it printed why itself
    if not errors:
        if summary.get("full"):
            print(summary["full"], file=out)
        return
    if summary.get("short"):
        print(f"accelerate-core launch: {summary['short']}", file=out)
    print(file=out)
    for error in errors:
        print(f"accelerate-core launch: error: {error.kind}: {error.message}", file=out)
    out.flush()
