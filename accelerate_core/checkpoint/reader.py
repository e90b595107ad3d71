"""Reading one checkpoint, validating before anything is restored (docs/checkpoint-format.md).

The manifest is checked first (present, our format, not newer, every listed file there with its
size), then each piece against what was prepared, each mismatch a CheckpointError that says what
differs. Nothing is unpickled: a directory of pickle files is named and refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

import accelerate_core.checkpoint.layout as layout
import accelerate_core.checkpoint.rng as rng
from accelerate_core.checkpoint.layout import CheckpointError, checkpoint_error
from accelerate_core.checkpoint.optimizer_state import NeutralOptimizer
from accelerate_core.errors import explain

_PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt")


class CheckpointReader:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.manifest = self._read_manifest()
        self.counts: dict[str, int] = {k: int(v) for k, v in self.manifest.get("counts", {}).items()}
        self.writer: dict[str, Any] = dict(self.manifest.get("writer", {}))

    # -- the manifest ---------------------------------------------------------------------------
    def _read_manifest(self) -> dict[str, Any]:
        d = self.directory
        if not d.is_dir():
            raise checkpoint_error(
                d, "it does not exist or is not a directory", "pass the directory that save_state wrote"
            )
        path = d / layout.MANIFEST
        if not path.is_file():
            present = sorted(p.name for p in d.iterdir())
            pickles = [n for n in present if n.endswith(_PICKLE_SUFFIXES)]
            expected = [layout.MANIFEST, layout.model_file(0), layout.PROGRESS, layout.rng_json_file(0)]
            missing = [n for n in expected if n not in present]
            why = (
                f"it has no {layout.MANIFEST}, which save_state writes last: the write did not finish, "
                f"or this is not a checkpoint of this format (missing: {missing}; present: {present[:12]})"
            )
            if pickles:
                why += (
                    f"; its pickle files {pickles[:6]} (the old layout) are never read, since "
                    "unpickling a file runs code from it"
                )
            raise checkpoint_error(
                d,
                why,
                "save again with save_state and let it finish, or convert the "
                "old checkpoint with the code that wrote it",
            )
        manifest = layout.read_json(path)
        if not isinstance(manifest, dict) or manifest.get("format") != layout.FORMAT_NAME:
            raise checkpoint_error(
                d,
                f"its {layout.MANIFEST} does not describe a {layout.FORMAT_NAME!r} checkpoint",
                "pass a directory written by save_state",
            )
        version = manifest.get("format_version")
        if not isinstance(version, int) or version > layout.FORMAT_VERSION or version < 1:
            raise checkpoint_error(
                d,
                f"its format_version is {version!r}, and this accelerate_core reads "
                f"format_version 1 to {layout.FORMAT_VERSION}",
                "load it with the accelerate_core release that wrote it (or a newer one)",
            )
        problems = []
        for name, info in dict(manifest.get("files", {})).items():
            file = d / name
            if not file.is_file():
                problems.append(f"{name} is missing")
            elif file.stat().st_size != int(info.get("bytes", -1)):
                problems.append(
                    f"{name} has {file.stat().st_size} bytes, the manifest says {info.get('bytes')}"
                )
            elif version >= 2 and info.get("sha256") != layout.sha256_of(file):
                problems.append(
                    f"{name} has the size the manifest says but not its sha256 (the file was "
                    f"changed after save_state wrote it: sha256 {layout.sha256_of(file)[:16]}..., the "
                    f"manifest says {str(info.get('sha256'))[:16]}...)"
                )
        if problems:
            raise checkpoint_error(
                d,
                "it is damaged: " + "; ".join(problems[:6]),
                "restore the files from a complete copy, or save again",
            )
        return manifest

    def _file(self, name: str, what: str) -> Path:
        if name not in self.manifest.get("files", {}):
            raise checkpoint_error(
                self.directory,
                f"it holds no {what} ({name} is not in its manifest)",
                "load it into a run that prepares the same objects as the run that saved it",
            )
        return self.directory / name

    # -- what was prepared ----------------------------------------------------------------------
    def check_counts(self, **prepared: int) -> None:
        """models=, optimizers=, schedulers=, dataloaders=: the numbers prepared now."""
        for kind, number in prepared.items():
            saved = self.counts.get(kind, 0)
            if saved != number:
                what = (
                    "missing optimizer state"
                    if kind == "optimizers" and saved < number
                    else f"{saved} {kind} saved"
                )
                raise CheckpointError(
                    explain(
                        f"load_state({str(self.directory)!r}) with {number} {kind} prepared",
                        f"the checkpoint has {saved} ({what})",
                        f"a checkpoint of a run that prepared {number} {kind}",
                        f"prepare the same {kind} as the run that saved it (in the same order)",
                    )
                )

    def check_precision(self, mixed_precision: str, allow_change: bool) -> None:
        saved = self.precision()["mixed_precision"]
        if saved != mixed_precision and not allow_change:
            raise CheckpointError(
                explain(
                    f"load_state({str(self.directory)!r}) into a run with "
                    f"mixed_precision={mixed_precision!r}",
                    f"the checkpoint was written with mixed_precision={saved!r}, and its loss-scaler "
                    "state (or the lack of one) cannot be honoured by this run",
                    f"the same mixed_precision ({saved!r})",
                    f"resume with mixed_precision={saved!r}, or pass load_state(dir, "
                    "allow_precision_change=True) to change it knowingly (weights and optimizer "
                    "state are fp32; an fp16 run then starts a fresh loss scaler)",
                )
            )

    # -- pieces ---------------------------------------------------------------------------------
    def model(self, index: int, expected: Mapping[str, torch.Size]) -> dict[str, torch.Tensor]:
        """Model `index`'s tensors, checked against the prepared model's names and full shapes."""
        state = layout.read_tensors(self._file(layout.model_file(index), f"model {index}"))
        missing = [k for k in expected if k not in state]
        extra = [k for k in state if k not in expected]
        shapes = [
            f"{k}: saved {tuple(state[k].shape)}, prepared {tuple(expected[k])}"
            for k in expected
            if k in state and tuple(state[k].shape) != tuple(expected[k])
        ]
        if missing or extra or shapes:
            details = "; ".join(
                part
                for part in (
                    f"missing {missing[:5]}" if missing else "",
                    f"unexpected {extra[:5]}" if extra else "",
                    f"shapes differ: {shapes[:3]}" if shapes else "",
                )
                if part
            )
            raise CheckpointError(
                explain(
                    f"load_state({str(self.directory)!r}): model {index}",
                    f"the saved weights belong to another model ({details})",
                    "a checkpoint of a model with the same parameter and buffer names and shapes",
                    "prepare the same architecture as the run that saved it",
                )
            )
        return state

    def optimizer(self, index: int) -> NeutralOptimizer:
        document = layout.read_json(self._file(layout.optimizer_json_file(index), f"optimizer {index} state"))
        flat = layout.read_tensors(
            self._file(layout.optimizer_tensors_file(index), f"optimizer {index} tensors")
        )
        return NeutralOptimizer.from_files(document, flat)

    def scheduler(self, index: int) -> dict[str, Any]:
        document = layout.read_json(self._file(layout.scheduler_file(index), f"scheduler {index}"))
        return dict(document["state"])

    def precision(self) -> dict[str, Any]:
        return dict(layout.read_json(self._file(layout.PRECISION, "precision state")))

    def progress(self) -> list[dict[str, Any]]:
        return list(layout.read_json(self._file(layout.PROGRESS, "dataloader progress"))["dataloaders"])

    def restore_rng(self, rank: int) -> bool:
        """Restore rank `rank`'s streams; False when the writer had fewer ranks."""
        files = self.manifest.get("files", {})
        if layout.rng_json_file(rank) not in files:
            return False
        document = layout.read_json(self.directory / layout.rng_json_file(rank))
        tensors = layout.read_tensors(self._file(layout.rng_tensors_file(rank), f"rank {rank} random state"))
        rng.restore(document, tensors)
        return True
