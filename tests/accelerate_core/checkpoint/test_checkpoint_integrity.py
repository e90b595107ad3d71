"""The checkpoint manifest's sha256 per file (format_version 2 and later, docs/checkpoint-format.md): a file
changed in place with bytes of the same length is refused, naming the file; a version-1
checkpoint (sizes only) still loads. One process, no launch."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from accelerate_core import Accelerator
from accelerate_core.checkpoint import FORMAT_VERSION, CheckpointError
from tests.accelerate_core.scripts.checkpoint_task import GAS, make_objects


def _prepared() -> tuple[Accelerator, tuple]:
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=GAS)
    model, opt, scheduler, loader = make_objects(1)
    return accelerator, accelerator.prepare(model, opt, loader, scheduler)


def _saved(tmp_path: Path) -> Path:
    accelerator, (model, opt, loader, scheduler) = _prepared()
    accelerator.backward(model(**next(iter(loader))).loss)
    opt.step()
    scheduler.step()
    directory = tmp_path / "ckpt"
    accelerator.save_state(directory)
    accelerator.free_memory()
    return directory


def _load(directory: Path) -> torch.nn.Module:
    accelerator, objects = _prepared()
    accelerator.load_state(directory)
    model = objects[0]
    accelerator.free_memory()
    return model


def test_every_file_in_the_manifest_has_its_size_and_sha256(tmp_path: Path) -> None:
    import hashlib

    directory = _saved(tmp_path)
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["format_version"] == FORMAT_VERSION == 3
    for name, entry in manifest["files"].items():
        data = (directory / name).read_bytes()
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name


def _overwrite_first_float_with_inf(path: Path) -> str:
    """Write +inf over the first element of the first float32 tensor, in place: the file keeps
    its size and stays a valid safetensors file (the format: an 8-byte header length, the JSON
    header with each tensor's data offsets, then the data)."""
    data = bytearray(path.read_bytes())
    header_length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + header_length])
    name, entry = next((n, e) for n, e in sorted(header.items())
                       if isinstance(e, dict) and e.get("dtype") == "F32")
    start = 8 + header_length + entry["data_offsets"][0]
    data[start:start + 4] = struct.pack("<f", math.inf)
    path.write_bytes(bytes(data))
    return name


def test_a_weight_overwritten_with_inf_in_place_is_refused(tmp_path: Path) -> None:
    directory = _saved(tmp_path)
    path = directory / "model_0.safetensors"
    size = path.stat().st_size
    name = _overwrite_first_float_with_inf(path)
    assert path.stat().st_size == size and math.isinf(float(load_file(path)[name].view(-1)[0]))
    with pytest.raises(CheckpointError) as info:
        _load(directory)
    message = str(info.value)
    assert "model_0.safetensors has the size the manifest says but not its sha256" in message
    assert "Fix:" in message


def test_a_version_1_checkpoint_without_hashes_still_loads_with_sizes_checked(tmp_path: Path) -> None:
    directory = _saved(tmp_path)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["format_version"] = 1
    manifest["files"] = {name: {"bytes": entry["bytes"]} for name, entry in manifest["files"].items()}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    saved = load_file(directory / "model_0.safetensors")
    loaded = _load(directory).state_dict()
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)
    path = directory / "optimizer_0.safetensors"
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(CheckpointError, match=r"optimizer_0\.safetensors has"):
        _load(directory)
