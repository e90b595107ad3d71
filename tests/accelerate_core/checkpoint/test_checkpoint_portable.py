"""Save on one backend, resume on another: the run continues as if never interrupted.

scripts/checkpoint_grid.py on 2 ranks (this module's part of the session's shared 2-rank launch,
shared_launch.py: if it fails, every test here fails with its output) plus 1-process runs in the
test process (the first, whose checkpoint the launch resumes from, just before the launch):
- uninterrupted runs under single (1 process), DDP, ZeRO-2 and ZeRO-3 (2 ranks; ZeRO-3 with
  every parameter really partitioned), each saving at optimizer step SAVE_AT, mid-epoch;
- resumed runs: ZeRO-3 (2 ranks) -> single (1 process), DDP, ZeRO-1; ZeRO-2 -> DDP, single;
  DDP -> ZeRO-3, single; single (1 process) -> ZeRO-2, ZeRO-3 (2 ranks). Each loads into a fresh
  Accelerator whose loader drew another shuffle seed (load_state must bring the saved one back)
  and resumes mid-epoch with skip_first_batches.
A resumed run must give the uninterrupted run's losses after the checkpoint, its learning rates
and its final weights, at torch.testing's fp32 tolerance. The consolidated state dict saved
under ZeRO-3 with `accelerator.save` loads into the plain model in a process that never imports
accelerate_core, and so does a checkpoint's model_0.safetensors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from tests.accelerate_core.scripts.checkpoint_task import (
    GAS,
    SAVE_AT,
    Net,
    micro_steps_before_checkpoint,
    prepare,
    user_loop,
)
from tests.accelerate_core.shared_launch import LaunchPart, Scenario
from tests.distributed_helpers import REPO_ROOT
from tests.run_if import run_if

pytestmark = [
    pytest.mark.deepspeed,
    pytest.mark.ddp,
    pytest.mark.slow,
    run_if(deepspeed=True, why="DeepSpeed tests skipped"),
]

# resumed run -> the uninterrupted run it must continue (same strategy and world size where
# there is one; all uninterrupted runs are shown to agree with each other below)
PAIRS = {
    "single_from_zero3": "single_full",
    "single_from_ddp": "single_full",
    "ddp_from_zero3": "ddp_full",
    "ddp_from_zero2": "ddp_full",
    "single_from_zero2": "single_full",
    "zero1_from_zero3": "zero3_full",
    "zero3_from_ddp": "zero3_full",
    "zero2_from_single": "single_full",
    "zero3_from_single": "zero3_full",
}


def _single(save_dir: Path | None = None, resume_from: Path | None = None) -> dict[str, Any]:
    from accelerate_core import Accelerator

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=GAS)
    model, optimizer, loader, scheduler = prepare(accelerator, 1234 + (1 if resume_from else 0))
    if resume_from is not None:
        accelerator.load_state(resume_from)
    record = user_loop(
        accelerator, model, optimizer, scheduler, loader, save_dir=save_dir, resume=resume_from is not None
    )
    accelerator.free_memory()
    return record


def single_full(out: Path) -> None:
    """Before the launch: the uninterrupted 1-process run, whose checkpoint (out/ckpt_single) the
    launch's zero2/zero3 runs resume from; its record goes to out/single_full.pt."""
    torch.save(_single(save_dir=out / "ckpt_single"), out / "single_full.pt")


SHARED_LAUNCH = LaunchPart(
    scenarios=lambda out, fixtures: [Scenario("grid", "tests.accelerate_core.scripts.checkpoint_grid",
                                    ("--out", str(out), "--single-ckpt", str(out / "ckpt_single")))],
    needs_deepspeed=True, timeout=600, before=single_full)


@pytest.fixture(scope="module")
def runs(shared_launch_out: Path) -> tuple[Path, dict[str, dict[str, Any]]]:
    out = shared_launch_out
    records = {path.stem: torch.load(path, weights_only=True)
               for path in out.glob("*.pt") if path.stem != "model_zero3"}  # single_full.pt too
    records["single_from_zero3"] = _single(resume_from=out / "ckpt_zero3")
    records["single_from_ddp"] = _single(resume_from=out / "ckpt_ddp")
    records["single_from_zero2"] = _single(resume_from=out / "ckpt_zero2")
    return out, records



def _close_runs(resumed: dict[str, Any], full: dict[str, Any], tail: int, first_step: int) -> None:
    """`resumed` took the last `tail` micro steps and the optimizer steps from `first_step` on."""
    losses = torch.tensor(full["losses"][-tail:], dtype=torch.float32)
    assert_close(torch.tensor(resumed["losses"], dtype=torch.float32), losses)
    assert_close(
        torch.tensor(resumed["lrs"], dtype=torch.float32),
        torch.tensor(full["lrs"][first_step:], dtype=torch.float32),
    )
    assert list(resumed["state_dict"]) == list(full["state_dict"])
    for key, value in full["state_dict"].items():
        assert_close(resumed["state_dict"][key], value, msg=lambda m, k=key: f"{k}: {m}")


def test_uninterrupted_runs_agree_across_backends(runs: tuple[Path, dict[str, dict[str, Any]]]) -> None:
    _, records = runs
    assert records["zero3_full"]["partitioned"], (
        "ZeRO-3 kept the parameters whole: nothing was re-partitioned"
    )
    for name in ("ddp_full", "zero2_full", "zero3_full"):
        _close_runs(records[name], records["single_full"], len(records["single_full"]["losses"]), 0)


@pytest.mark.parametrize("resumed", sorted(PAIRS))
def test_resumed_run_continues_the_uninterrupted_one(
    runs: tuple[Path, dict[str, dict[str, Any]]], resumed: str
) -> None:
    _, records = runs
    full = records[PAIRS[resumed]]
    tail = len(full["losses"]) - micro_steps_before_checkpoint()
    assert len(records[resumed]["losses"]) == tail  # resumed mid-epoch, at the next batch
    _close_runs(records[resumed], full, tail, SAVE_AT)


def test_checkpoint_files_are_the_neutral_format(runs: tuple[Path, dict[str, dict[str, Any]]]) -> None:
    out, _ = runs
    names = {p.name for p in (out / "ckpt_zero3").iterdir()}
    manifest = json.loads((out / "ckpt_zero3" / "manifest.json").read_text())
    assert names == set(manifest["files"]) | {"manifest.json"}
    assert manifest["format_version"] == 3 and manifest["writer"]["strategy"] == "zero3"
    assert manifest["writer"]["world_size"] == 2
    assert {p.name for p in (out / "ckpt_ddp").iterdir()} == names  # the same files whatever wrote it


_PLAIN_LOAD = """
import json, sys
import torch
from safetensors.torch import load_file
sys.path.insert(0, {root!r})
from tests.accelerate_core.scripts.checkpoint_task import Net
x = torch.linspace(-1, 1, 18).reshape(3, 6)
out = {{}}
for name, state in (("saved", torch.load({saved!r}, weights_only=True)),
                    ("checkpoint", load_file({neutral!r}))):
    model = Net()
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        out[name] = model(x, torch.zeros(3)).logits.tolist()
assert not [m for m in sys.modules if m.startswith("accelerate_core")], "accelerate_core was imported"
print(json.dumps(out))
"""


def test_zero3_state_dict_loads_into_a_plain_module_without_the_core(
    runs: tuple[Path, dict[str, dict[str, Any]]],
) -> None:
    out, records = runs
    code = _PLAIN_LOAD.format(
        root=str(REPO_ROOT),
        saved=str(out / "model_zero3.pt"),
        neutral=str(out / "ckpt_zero3" / "model_0.safetensors"),
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO_ROOT),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    plain = json.loads(result.stdout.strip().splitlines()[-1])
    x = torch.linspace(-1, 1, 18).reshape(3, 6)
    model = Net()
    model.load_state_dict(records["zero3_full"]["state_dict"])
    with torch.no_grad():
        expected = model(x, torch.zeros(3)).logits
    assert_close(torch.tensor(plain["saved"]), expected)
    # The checkpoint holds the weights of step SAVE_AT, not the final ones.
    assert not torch.allclose(torch.tensor(plain["checkpoint"]), expected)
