"""Atomic file writes: a reader (the parent watching a launch, a CI step, a browser, a second
run) never sees half a file. The one helper every phase of the harness writes through."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a temporary file in the same directory and os.replace.

    The temporary file lives beside the target so that os.replace is a rename on one
    filesystem (atomic on POSIX); an interrupted write leaves the previous file intact.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        # Also on KeyboardInterrupt: never leave a stray temporary file behind.
        Path(tmp_name).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))
