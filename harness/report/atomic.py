"""Atomic file writes: a reader (a CI step, a browser, a second run) never sees half a report."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` via a temporary file in the same directory and os.replace.

    The temporary file lives beside the target so that os.replace is a rename on one
    filesystem (atomic on POSIX); an interrupted run leaves the previous file intact.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        # Also on KeyboardInterrupt: never leave a stray temporary file behind.
        Path(tmp_name).unlink(missing_ok=True)
        raise
