"""Writing one checkpoint: every file atomically, the manifest last (docs/checkpoint-format.md).

Order matters for atomicity: `begin` removes the directory's old manifest before anything is
overwritten, so a crash half-way leaves a directory that load_state refuses rather than a mix of
two checkpoints that it would accept.
"""

from __future__ import annotations

import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

import accelerate_core.checkpoint.layout as layout
import accelerate_core.checkpoint.rng as rng
from accelerate_core.checkpoint.layout import CheckpointError
from accelerate_core.checkpoint.optimizer_state import NeutralOptimizer, class_name
from accelerate_core.errors import explain


class CheckpointWriter:
    """Used by the Accelerator and its strategy on every rank; only the main process writes the
    shared files, each rank its own RNG files."""

    def __init__(self, directory: Path, rank: int, world_size: int) -> None:
        self.directory = Path(directory)
        self.rank = rank
        self.world_size = world_size
        self.is_main = rank == 0
        self._written: list[str] = []  # shared files, in writing order (main process)

    def begin(self) -> None:
        """Main process, before any rank writes: make the directory, drop its old manifest."""
        if not self.is_main:
            return
        if self.directory.exists() and not self.directory.is_dir():
            raise CheckpointError(
                explain(
                    f"save_state({str(self.directory)!r})",
                    "the path is a file",
                    "a directory path (created if missing)",
                    "pass a directory",
                )
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / layout.MANIFEST).unlink(missing_ok=True)

    def _json(self, name: str, value: Any) -> None:
        if self.is_main:
            layout.write_json(self.directory / name, value)
            self._written.append(name)

    def _tensors(self, name: str, tensors: dict[str, torch.Tensor]) -> None:
        if self.is_main:
            layout.write_tensors(self.directory / name, tensors)
            self._written.append(name)

    def model(self, index: int, state: dict[str, torch.Tensor]) -> None:
        full = {k: (v.float() if v.is_floating_point() else v) for k, v in state.items()}
        self._tensors(layout.model_file(index), full)

    def optimizer(self, index: int, neutral: NeutralOptimizer) -> None:
        self._tensors(layout.optimizer_tensors_file(index), neutral.flat_tensors())
        self._json(layout.optimizer_json_file(index), neutral.to_json())

    def scheduler(self, index: int, scheduler: Any) -> None:
        if not self.is_main:
            return
        state = layout.to_json_value(scheduler.state_dict(), f"scheduler {index}.state_dict()")
        self._json(layout.scheduler_file(index), {"class": class_name(scheduler), "state": state})

    def precision(self, mixed_precision: str, loss_scaler: dict[str, Any] | None) -> None:
        self._json(layout.PRECISION, {"mixed_precision": mixed_precision, "loss_scaler": loss_scaler})

    def progress(self, dataloaders: list[dict[str, Any]]) -> None:
        self._json(layout.PROGRESS, {"dataloaders": dataloaders})

    def rng(self) -> None:
        """Every rank: its own random streams."""
        document, tensors = rng.capture()
        layout.write_json(self.directory / layout.rng_json_file(self.rank), document)
        layout.write_tensors(self.directory / layout.rng_tensors_file(self.rank), tensors)

    def finish(self, writer: dict[str, Any], counts: dict[str, int]) -> None:
        """Main process, after every rank has written: the manifest, last."""
        if not self.is_main:
            return
        names = list(self._written)
        for rank in range(self.world_size):
            names += [layout.rng_json_file(rank), layout.rng_tensors_file(rank)]
        files: dict[str, dict[str, int | str]] = {}
        for name in names:
            path = self.directory / name
            if not path.is_file():  # a rank that did not write (another filesystem?)
                raise CheckpointError(
                    explain(
                        f"save_state({str(self.directory)!r})",
                        f"{name} is missing after every rank wrote its part",
                        "a directory every rank can write and read (a shared filesystem)",
                        "save to a directory visible to all ranks",
                    )
                )
            # The hash, not only the size: a file overwritten in place with other bytes of the
            # same length (a weight set to inf) must not load silently.
            files[name] = {"bytes": path.stat().st_size, "sha256": layout.sha256_of(path)}
        manifest = {
            "format": layout.FORMAT_NAME,
            "format_version": layout.FORMAT_VERSION,
            "writer": {**writer, "world_size": self.world_size},
            "versions": _versions(),
            "counts": {**counts, "ranks": self.world_size},
            "files": files,
        }
        layout.write_json(self.directory / layout.MANIFEST, manifest)


def _versions() -> dict[str, str | None]:
    def version(package: str) -> str | None:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return None

    return {
        "torch": torch.__version__,
        "deepspeed": version("deepspeed"),
        "accelerate_core": version("accelerate-core"),
        "safetensors": version("safetensors"),
        "python": platform.python_version(),
    }
