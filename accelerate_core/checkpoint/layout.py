"""File names, the format version and the low-level reads and writes of one checkpoint file.

Reads never unpickle: safetensors and JSON only. Every failure to read becomes a
CheckpointError naming the file and what is wrong with it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes

from accelerate_core.checkpoint.atomic import atomic_write_bytes
from accelerate_core.errors import AccelerateCoreError, explain

FORMAT_NAME = "accelerate_core.checkpoint"
# 3: a shuffled dataloader's progress keeps its pass's order and its generator's state (2: a
# shuffle seed; still read). 2: the manifest carries each file's sha256 besides its size (1: sizes
# only; still read).
FORMAT_VERSION = 3
MANIFEST = "manifest.json"
PRECISION = "precision.json"
PROGRESS = "progress.json"


def model_file(i: int) -> str:
    return f"model_{i}.safetensors"


def optimizer_tensors_file(i: int) -> str:
    return f"optimizer_{i}.safetensors"


def optimizer_json_file(i: int) -> str:
    return f"optimizer_{i}.json"


def scheduler_file(i: int) -> str:
    return f"scheduler_{i}.json"


def rng_json_file(rank: int) -> str:
    return f"rng_rank{rank}.json"


def rng_tensors_file(rank: int) -> str:
    return f"rng_rank{rank}.safetensors"


class CheckpointError(AccelerateCoreError, ValueError):
    """A checkpoint directory cannot be written or read as asked (incomplete, another model,
    a newer format, state that does not fit what was prepared)."""


def checkpoint_error(directory: Path, why: str, fix: str) -> CheckpointError:
    return CheckpointError(
        explain(
            f"checkpoint directory {str(directory)!r}",
            why,
            "a directory written by Accelerator.save_state "
            f"(format_version <= {FORMAT_VERSION}, see docs/checkpoint-format.md)",
            fix,
        )
    )


def sha256_of(path: Path) -> str:
    """The file's sha256, read in blocks (a checkpoint's model file may be large)."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_json(path: Path, value: Any) -> None:
    text = json.dumps(value, indent=1, sort_keys=False) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise checkpoint_error(
            path.parent,
            f"{path.name} is not readable JSON ({exc})",
            "write the checkpoint again with save_state",
        ) from exc


def write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    # safetensors refuses tensors that share storage (tied weights, views): one copy each.
    plain = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    atomic_write_bytes(path, safetensors_bytes(plain, metadata={"format": "pt"}))


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path), device="cpu")
    except (OSError, SafetensorError) as exc:
        raise checkpoint_error(
            path.parent,
            f"{path.name} is not a safetensors file ({exc})",
            "write the checkpoint again with save_state",
        ) from exc


def to_json_value(value: Any, where: str) -> Any:
    """A state value as JSON (tuples become lists); anything else is refused by name."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [to_json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {str(k): to_json_value(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    raise CheckpointError(
        explain(
            f"save_state: {where} is a {type(value).__name__}",
            "the checkpoint keeps non-tensor state as JSON and this value has no JSON form",
            "numbers, strings, bools, None, and lists/dicts of them",
            "keep such objects out of optimizer/scheduler state, or save them yourself",
        )
    )


def like(template: Any, value: Any) -> Any:
    """`value` read from JSON, shaped like the live `template` (tuples where it has tuples)."""
    if isinstance(template, tuple) and isinstance(value, list):
        return tuple(value)
    return value
