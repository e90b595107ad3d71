"""What load_state refuses, and why (docs/checkpoint-format.md): one process, no launch.

Each test writes a real checkpoint with save_state, damages or mismatches it the way it happens
in practice, and checks that load_state raises CheckpointError naming what is wrong (and, for
pickles, that nothing in the directory was ever executed).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from accelerate_core import Accelerator
from accelerate_core.checkpoint import FORMAT_VERSION, CheckpointError
from tests.accelerate_core.scripts.checkpoint_task import GAS, Net, Pairs, make_objects
from tests.distributed_helpers import REPO_ROOT

CORE = REPO_ROOT / "accelerate_core"


def _trained(tmp_path: Path, mixed_precision: str = "no", optimizer: bool = True) -> Path:
    """A checkpoint after one optimizer step, one batch into the epoch."""
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision, gradient_accumulation_steps=GAS)
    model, opt, scheduler, loader = make_objects(1)
    objects = (
        accelerator.prepare(model, opt, loader, scheduler)
        if optimizer
        else accelerator.prepare(model, loader)
    )
    model, loader = objects[0], objects[-2] if optimizer else objects[1]
    batch = next(iter(loader))
    accelerator.backward(model(**batch).loss)
    if optimizer:
        objects[1].step()
        objects[3].step()
    directory = tmp_path / "ckpt"
    accelerator.save_state(directory)
    accelerator.free_memory()
    return directory


def _load(
    directory: Path,
    model: nn.Module | None = None,
    mixed_precision: str = "no",
    allow_precision_change: bool = False,
) -> Accelerator:
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision, gradient_accumulation_steps=GAS)
    fresh, opt, scheduler, loader = make_objects(1)
    model = model or fresh
    if model is not fresh:
        opt = torch.optim.AdamW(model.parameters())
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    accelerator.prepare(model, opt, loader, scheduler)
    accelerator.load_state(directory, allow_precision_change=allow_precision_change)
    return accelerator


def _refused(directory: Path, *needles: str, **kwargs: Any) -> str:
    with pytest.raises(CheckpointError) as info:
        _load(directory, **kwargs)
    message = str(info.value)
    for needle in needles:
        assert needle in message, message
    assert "Fix:" in message
    return message


def test_a_checkpoint_without_manifest_is_refused_naming_what_is_missing(tmp_path: Path) -> None:
    directory = _trained(tmp_path)
    (directory / "manifest.json").unlink()
    _refused(directory, "manifest.json", "missing")


def test_a_failed_save_leaves_a_directory_that_load_state_refuses(tmp_path: Path) -> None:
    directory = _trained(tmp_path)  # a complete checkpoint, then a second save into it fails
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=GAS)
    model, opt, _, loader = make_objects(1)

    class Unsaveable:  # a schedule object whose state has no JSON form (torch saves its __dict__)
        def __init__(self) -> None:
            self.generator = torch.Generator()

        def __call__(self, step: int) -> float:
            return 1.0

    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, Unsaveable())
    accelerator.prepare(model, opt, loader, scheduler)
    with pytest.raises(CheckpointError, match="no JSON form"):
        accelerator.save_state(directory)
    accelerator.free_memory()
    assert (directory / "model_0.safetensors").exists() and not (directory / "manifest.json").exists()
    _refused(directory, "manifest.json")


def test_a_damaged_file_is_refused(tmp_path: Path) -> None:
    directory = _trained(tmp_path)
    path = directory / "optimizer_0.safetensors"
    path.write_bytes(path.read_bytes()[:-10])
    _refused(directory, "optimizer_0.safetensors", "bytes")


def test_a_newer_format_version_is_refused(tmp_path: Path) -> None:
    directory = _trained(tmp_path)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["format_version"] = FORMAT_VERSION + 1
    (directory / "manifest.json").write_text(json.dumps(manifest))
    _refused(directory, f"format_version is {FORMAT_VERSION + 1}")


def test_another_model_is_refused_naming_the_difference(tmp_path: Path) -> None:
    directory = _trained(tmp_path)
    wider = Net()
    wider.head = nn.Linear(8, 2)
    _refused(directory, "head.weight", "(2, 8)", "(1, 8)", model=wider)
    renamed = Net()
    renamed.extra = nn.Linear(2, 2)
    _refused(directory, "extra.weight", model=renamed)


def test_missing_optimizer_state_is_refused(tmp_path: Path) -> None:
    directory = _trained(tmp_path, optimizer=False)
    _refused(directory, "missing optimizer state")


def test_a_precision_that_cannot_be_honoured_is_refused_unless_allowed(tmp_path: Path) -> None:
    directory = _trained(tmp_path, mixed_precision="no")
    _refused(directory, "mixed_precision='bf16'", "'no'", mixed_precision="bf16")
    _load(directory, mixed_precision="bf16", allow_precision_change=True).free_memory()


class _Payload:
    """Unpickling this runs code: it creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.makedirs, (str(self.marker),))


def test_a_pickle_in_the_directory_is_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "code_ran"
    payload = pickle.dumps({"state": _Payload(marker)})
    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(_Payload(probe)))  # the payload does run code when unpickled
    assert probe.exists()
    # The old pickled layout: refused by name, nothing unpickled.
    old = tmp_path / "old"
    old.mkdir()
    for name in (
        "model_0.pt",
        "optimizer_0.pt",
        "scheduler_0.pt",
        "precision.pt",
        "extra.pt",
        "rng_state_rank0.pt",
    ):
        (old / name).write_bytes(payload)
    _refused(old, "model_0.pt", "never read")
    # A valid manifest whose model file is a pickle of the right size: not safetensors, refused.
    directory = _trained(tmp_path)
    (directory / "model_0.safetensors").write_bytes(payload)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["files"]["model_0.safetensors"]["bytes"] = len(payload)
    manifest["files"]["model_0.safetensors"]["sha256"] = hashlib.sha256(payload).hexdigest()
    (directory / "manifest.json").write_text(json.dumps(manifest))
    _refused(directory, "model_0.safetensors", "not a safetensors file")
    assert not marker.exists()


def test_the_core_never_unpickles_a_checkpoint() -> None:
    offenders = [
        f"{path.relative_to(CORE)}:{n}"
        for path in CORE.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "weights_only=False" in line or "pickle.load" in line
    ]
    assert offenders == []


def test_resume_converts_the_position_to_another_global_batch(tmp_path: Path) -> None:
    """Saved after 2 batches of 8 (16 samples): a loader of 4 per step skips 4 batches and
    yields exactly the samples the uninterrupted loader of 8 would; one of 3 cannot."""

    def prepared(batch_size: int, seed: int = 5) -> tuple[Accelerator, Any]:
        accelerator = Accelerator(cpu=True)
        torch.manual_seed(seed)  # the loader's shuffle seed is drawn at prepare()
        loader = DataLoader(Pairs(), batch_size=batch_size, shuffle=True)
        return accelerator, accelerator.prepare(loader)

    accelerator, loader = prepared(8)
    batches = iter(loader)
    next(batches), next(batches)
    accelerator.save_state(tmp_path / "ckpt")
    expected = torch.cat([b["x"] for b in batches])
    accelerator.free_memory()

    accelerator, smaller = prepared(4, seed=6)  # another shuffle seed: load_state puts the saved one back
    accelerator.load_state(tmp_path / "ckpt")
    rest = accelerator.skip_first_batches(smaller)
    assert rest.skip == 4
    torch.testing.assert_close(torch.cat([b["x"] for b in rest]), expected, rtol=0, atol=0)
    accelerator.free_memory()

    accelerator, _ = prepared(3)
    with pytest.raises(CheckpointError, match="not a whole number"):
        accelerator.load_state(tmp_path / "ckpt")


@pytest.mark.parametrize("shuffle", [False, True], ids=["in-order", "shuffled"])
def test_the_random_numbers_after_a_resume_are_the_uninterrupted_runs(tmp_path: Path, shuffle: bool) -> None:
    """Dropout after a resume: the uninterrupted run drew its loader iterator's base seed at the
    start of the epoch, before it saved; the resumed pass must not draw it again, shuffled or not
    (an in-order loader's iterator draws one too), or every mask after the resume is one draw off."""

    def prepared() -> tuple[Accelerator, Any]:
        accelerator = Accelerator(cpu=True)
        loader = DataLoader(Pairs(), batch_size=4, shuffle=shuffle,
                            generator=torch.Generator().manual_seed(3) if shuffle else None)
        return accelerator, accelerator.prepare(loader)

    torch.manual_seed(0)
    accelerator, loader = prepared()
    batches = iter(loader)
    for _ in range(2):
        next(batches)
        torch.rand(3)  # the masks of a training step
    accelerator.save_state(tmp_path / "ckpt")
    expected = [(batch["x"], torch.rand(3)) for batch in batches]
    accelerator.free_memory()

    torch.manual_seed(1)  # another stream: load_state puts the saved one back
    accelerator, loader = prepared()
    accelerator.load_state(tmp_path / "ckpt")
    resumed = [(batch["x"], torch.rand(3)) for batch in accelerator.skip_first_batches(loader)]
    assert len(resumed) == len(expected) > 0
    for (x, draws), (want_x, want_draws) in zip(resumed, expected, strict=True):
        torch.testing.assert_close(x, want_x, rtol=0, atol=0)
        torch.testing.assert_close(draws, want_draws, rtol=0, atol=0)
    accelerator.free_memory()
