"""Files on disk: atomic writes and the per-rank random-number-generator states.

A checkpoint is a directory. The strategy writes the model/optimizer/scheduler/precision part
(its layout is backend-specific); the Accelerator adds one RNG file per rank, since every rank
draws its own random numbers (dropout, augmentation) and must resume its own stream.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import torch

RNG_FILE = "rng_state_rank{rank}.pt"


def atomic_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """torch.save to a temporary file beside `path`, then rename: a reader never sees half a
    file, and a crash leaves the previous file intact."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np  # optional: only when the user has it

        state["numpy"] = np.random.get_state()
    except ImportError:
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_rng_state(directory: Path, rank: int) -> None:
    atomic_save(rng_state(), directory / RNG_FILE.format(rank=rank))


def load_rng_state(directory: Path, rank: int) -> None:
    path = directory / RNG_FILE.format(rank=rank)
    if path.exists():  # a checkpoint written by fewer ranks leaves the others' streams alone
        set_rng_state(torch.load(path, weights_only=False))
