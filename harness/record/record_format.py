"""`Record`: what one run produced, and its files.

A record is a pair `<stem>.safetensors` (every tensor, losses and lrs included, so that they are
covered by one hash) and `<stem>.json` (the fingerprint, skipped steps, the tensors file's sha256
and any metadata). Both are written through a temp file and `os.replace`, the JSON last: a JSON
file that exists therefore names a complete tensors file, and a tensors file that was cut short
or replaced since is caught by its hash.
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from harness.atomic_files import write_bytes_atomic
from harness.errors import RecordError, explain

# 2: the JSON carries `json_sha256`, the hash of every other field of it (1 hashed the tensors
# only: a hand-edited `skipped_steps` went unnoticed).
FORMAT_VERSION = 2
_LOSSES, _LRS, _SCALES = "losses", "lrs", "loss_scales"
_EVAL, _STATE = "eval/", "state_dict/"




@dataclass(frozen=True)
class Fingerprint:
    """Where and how a record was made."""

    versions: dict[str, str]
    device: str
    world_size: int
    seed: int
    precision: str
    strategy: str  # "reference" for a golden, else the cell's strategy
    emulated: bool = False

    @classmethod
    def here(cls, *, device: str, world_size: int, seed: int, precision: str, strategy: str,
             emulated: bool = False) -> Fingerprint:
        # The reference never touches deepspeed: leaving its version out of a golden keeps the
        # golden byte-identical whether or not deepspeed is installed.
        return cls(versions=versions(with_deepspeed=strategy != "reference"), device=device,
                   world_size=world_size, seed=seed, precision=precision, strategy=strategy,
                   emulated=emulated)


def versions(with_deepspeed: bool = True) -> dict[str, str]:
    """Versions that decide numerics. deepspeed is looked up, never imported."""
    found = {"python": platform.python_version(), "torch": torch.__version__,
             "machine": platform.machine()}
    if not with_deepspeed:
        return found
    try:
        found["deepspeed"] = metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        found["deepspeed"] = "absent"
    return found


@dataclass
class Record:
    task: str
    precision: str
    losses: list[float]  # per micro-step (the loop's `step`, over all epochs): global-mean loss
    lrs: list[list[float]]  # per optimizer step: the lr of each param group used by that step
    skipped_steps: list[int]  # optimizer steps skipped by loss scaling (0-based)
    loss_scales: list[float]  # per optimizer step, after it; empty without loss scaling
    eval_outputs: dict[str, torch.Tensor]  # over the whole eval set, in dataset order
    state_dict: dict[str, torch.Tensor]  # final, full (consolidated), on CPU
    fingerprint: Fingerprint
    meta: dict[str, Any] = field(default_factory=dict)  # free-form JSON (goldens keep theirs here)

    def __post_init__(self) -> None:
        # Own copies: tied weights share storage, which safetensors refuses to write.
        self.eval_outputs = {k: _own(v) for k, v in self.eval_outputs.items()}
        self.state_dict = {k: _own(v) for k, v in self.state_dict.items()}

    # ------------------------------------------------------------------------- bytes
    def tensors(self) -> dict[str, torch.Tensor]:
        out = {
            _LOSSES: torch.tensor(self.losses, dtype=torch.float64),
            _LRS: torch.tensor(self.lrs, dtype=torch.float64).reshape(len(self.lrs), -1),
            _SCALES: torch.tensor(self.loss_scales, dtype=torch.float64),
        }
        out.update({_EVAL + k: v for k, v in self.eval_outputs.items()})
        out.update({_STATE + k: v for k, v in self.state_dict.items()})
        return out

    def tensor_bytes(self) -> bytes:
        return save_tensors(self.tensors())

    def json_text(self, tensor_bytes: bytes, stem_name: str) -> str:
        body = {
            "format_version": FORMAT_VERSION,
            "task": self.task,
            "precision": self.precision,
            "skipped_steps": self.skipped_steps,
            "fingerprint": asdict(self.fingerprint),
            "tensors_file": stem_name + ".safetensors",
            "tensors_sha256": hashlib.sha256(tensor_bytes).hexdigest(),
            "meta": self.meta,
        }
        body["json_sha256"] = json_sha256(body)
        return json.dumps(body, indent=2, sort_keys=True) + "\n"

    # ------------------------------------------------------------------------- files
    def save(self, path_stem: Path) -> None:
        path_stem = Path(path_stem)
        path_stem.parent.mkdir(parents=True, exist_ok=True)
        data = self.tensor_bytes()
        write_bytes_atomic(path_stem.with_name(path_stem.name + ".safetensors"), data)
        write_bytes_atomic(path_stem.with_name(path_stem.name + ".json"),
                      self.json_text(data, path_stem.name).encode())

    @classmethod
    def load(cls, path_stem: Path, fix: str = "rerun the cell") -> Record:
        """The record at `path_stem`; `fix` is the advice a refusal ends with (a golden's is
        to regenerate it, a cell's to rerun it)."""
        path_stem = Path(path_stem)
        json_path = path_stem.with_name(path_stem.name + ".json")
        tensor_path = path_stem.with_name(path_stem.name + ".safetensors")
        if not json_path.exists():
            raise RecordError(explain(f"record {json_path}", "the file does not exist (the run did "
                                      "not finish writing it, or the path is wrong)",
                                      "an existing <stem>.json beside <stem>.safetensors", fix))
        try:
            body = json.loads(json_path.read_text())
            expected_sha = body["tensors_sha256"]
        except (ValueError, KeyError) as exc:
            raise RecordError(explain(f"record {json_path}", f"it is not a record's JSON ({exc})",
                                      "JSON written by Record.save", fix)) from None
        if body.get("format_version") != FORMAT_VERSION:
            raise RecordError(explain(f"record {json_path}", f"format_version "
                                      f"{body.get('format_version')!r} is not this harness's",
                                      str(FORMAT_VERSION), fix))
        if body.get("json_sha256") != json_sha256(body):
            raise RecordError(explain(
                f"record {json_path}", "its fields differ from those its json_sha256 was computed "
                "from: the JSON was edited after it was written", "the JSON written by Record.save",
                fix))
        if not tensor_path.exists():
            raise RecordError(explain(f"record tensors {tensor_path}", "the file does not exist",
                                      "the .safetensors file named by the JSON", fix))
        data = tensor_path.read_bytes()
        actual_sha = hashlib.sha256(data).hexdigest()
        if actual_sha != expected_sha:
            raise RecordError(explain(
                f"record tensors {tensor_path} (sha256 {actual_sha[:16]}..., {len(data)} bytes)",
                f"its sha256 differs from {expected_sha[:16]}... recorded in {json_path.name}: the "
                "file was truncated, overwritten or edited after it was written",
                "the tensors file written together with its JSON", fix))
        return cls.from_parts(body, load_tensors(data), source=str(tensor_path))

    @classmethod
    def from_parts(cls, body: dict[str, Any], tensors: dict[str, torch.Tensor], source: str) -> Record:
        missing = [k for k in (_LOSSES, _LRS, _SCALES) if k not in tensors]
        if missing:
            raise RecordError(explain(f"record {source}", f"tensors {missing} are missing",
                                      "a file written by Record.save", "rerun to rewrite it"))
        mistyped = _mistyped_fields(body)
        if mistyped:
            raise RecordError(explain(f"record {source}", f"its JSON mistypes {'; '.join(mistyped)}",
                                      "JSON written by Record.save", "rerun to rewrite it"))
        try:
            return cls(
                task=body["task"],
                precision=body["precision"],
                losses=tensors[_LOSSES].tolist(),
                lrs=tensors[_LRS].tolist(),
                skipped_steps=list(body["skipped_steps"]),
                loss_scales=tensors[_SCALES].tolist(),
                eval_outputs={k[len(_EVAL):]: v for k, v in tensors.items() if k.startswith(_EVAL)},
                state_dict={k[len(_STATE):]: v for k, v in tensors.items() if k.startswith(_STATE)},
                fingerprint=Fingerprint(**body["fingerprint"]),
                meta=dict(body.get("meta", {})),
            )
        except (KeyError, TypeError) as exc:
            raise RecordError(explain(f"record {source}", f"its JSON lacks or mistypes {exc}",
                                      "JSON written by Record.save", "rerun to rewrite it")) from None


def json_sha256(body: dict[str, Any]) -> str:
    """The hash of a record JSON's every field but itself, in a canonical form (sorted keys, no
    whitespace), so that re-indenting the file changes nothing and changing a value does."""
    fields = {key: value for key, value in body.items() if key != "json_sha256"}
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


# The JSON fields and the Python types they must hold (bool is an int to Python: refused where an
# int is meant, so `true` is never read as step 1).
_FIELD_TYPES: dict[str, type] = {"task": str, "precision": str, "skipped_steps": list, "meta": dict,
                                 "fingerprint": dict}
_FINGERPRINT_TYPES: dict[str, type] = {"versions": dict, "device": str, "world_size": int, "seed": int,
                                       "precision": str, "strategy": str, "emulated": bool}


def _mistyped_fields(body: dict[str, Any]) -> list[str]:
    """Each field whose value is not of its type, as "name: expected T, found V"."""
    found: list[str] = []

    def check(name: str, value: Any, wanted: type) -> None:
        if not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)):
            found.append(f"{name}: expected {wanted.__name__}, found {value!r:.60}")

    for name, wanted in _FIELD_TYPES.items():
        if name in body:
            check(name, body[name], wanted)
    steps = body.get("skipped_steps")
    for index, step in enumerate(steps if isinstance(steps, list) else []):
        check(f"skipped_steps[{index}]", step, int)
    fingerprint = body.get("fingerprint")
    for name, wanted in _FINGERPRINT_TYPES.items():
        if isinstance(fingerprint, dict) and name in fingerprint:
            check(f"fingerprint.{name}", fingerprint[name], wanted)
    return found


def _own(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu").clone().contiguous()
