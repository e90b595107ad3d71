"""Atomic file writes: a reader never sees half a file, and a crash leaves the previous file.

`atomic_save` is `accelerator.save` (torch.save of the user's object; a dict of tensors loads back
with `torch.load(path, weights_only=True)`). The checkpoint of `save_state` is written by
the rest of this package (safetensors and JSON, never pickle) through `atomic_write`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], None]) -> None:
    """Call `write(handle)` on a temporary file beside `path`, fsync it, then rename it over
    `path`."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """torch.save, atomically."""
    atomic_write(path, lambda handle: torch.save(obj, handle))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    def write(handle: IO[bytes]) -> None:
        handle.write(data)

    atomic_write(path, write)
