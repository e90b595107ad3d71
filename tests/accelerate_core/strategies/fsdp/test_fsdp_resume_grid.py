"""FSDP2 checkpoints on 2 real CPU ranks (gloo): save_state under FSDP resumed under DDP, under one
process and back (and under ZeRO-3 and back where deepspeed is installed), each resumed run
continuing the uninterrupted one; the checkpoint FSDP writes is the neutral format DDP writes.

This module's part of the session's shared 2-rank launch (shared_launch.py) runs
scripts/fsdp_checkpoint_grid.py, after the 1-process run it resumes from (made here, before the
launch). Its ZeRO-3 phases come last in it, and a ZeRO-3 run after FSDP in the same launch is
checked unaffected. Tolerance: torch's fp32 defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from accelerate_core.imports import is_deepspeed_available
from tests.accelerate_core.scripts.checkpoint_task import (
    GAS,
    SAVE_AT,
    micro_steps_before_checkpoint,
    prepare,
    user_loop,
)
from tests.accelerate_core.shared_launch import LaunchPart, Scenario
from tests.accelerate_core.strategies.fsdp.weights import FP32, assert_weights
from tests.run_if import run_if

pytestmark = [pytest.mark.fsdp, pytest.mark.slow]


def _single(save_dir: Path | None = None, resume_from: Path | None = None) -> dict[str, Any]:
    """checkpoint_task's user loop on one process (the single-device strategy), in this process."""
    from accelerate_core import Accelerator

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=GAS)
    model, optimizer, loader, scheduler = prepare(accelerator, 1234 + (1 if resume_from else 0))
    if resume_from is not None:
        accelerator.load_state(resume_from)
    record = user_loop(accelerator, model, optimizer, scheduler, loader, save_dir=save_dir,
                       resume=resume_from is not None)
    accelerator.free_memory()
    return record


def _single_full(out: Path) -> None:
    """Before the launch: the uninterrupted 1-process run, whose checkpoint the launch's FSDP run
    resumes from."""
    torch.save(_single(save_dir=out / "ckpt_single"), out / "single_full.pt")



def _scenarios(out: Path, fixtures: frozenset[str]) -> list[Scenario]:
    grid = ["--out", str(out / "grid"), "--single-ckpt", str(out / "ckpt_single")]
    if is_deepspeed_available():
        grid.append("--zero3")
    return [Scenario("grid", "tests.accelerate_core.scripts.fsdp_checkpoint_grid", tuple(grid))]


# No DeepSpeed before the grid's last phases: with the DDP-only parts (order -1). The module name
# sorts after test_fsdp_mission, so the grid (and its ZeRO-3 phases) runs after the FSDP missions.
SHARED_LAUNCH = LaunchPart(scenarios=_scenarios, timeout=300, before=_single_full, order=-1)


# -- fsdp_checkpoint_grid.py ------------------------------------------------------------------------
# resumed run -> the uninterrupted run it must continue
PAIRS = {
    "ddp_from_fsdp": "ddp_full",
    "fsdp_from_ddp": "fsdp_full",
    "fsdp_from_single": "fsdp_full",
    "single_from_fsdp": "single_full",
}
ZERO3_PAIRS = {"zero3_from_fsdp": "zero3_full", "fsdp_from_zero3": "fsdp_full"}


@pytest.fixture(scope="module")
def grid(shared_launch_out: Path) -> dict[str, dict[str, Any]]:
    out = shared_launch_out / "grid"
    records = {path.stem: torch.load(path, weights_only=True) for path in out.glob("*.pt")}
    records["single_full"] = torch.load(shared_launch_out / "single_full.pt", weights_only=True)
    records["single_from_fsdp"] = _single(resume_from=out / "ckpt_fsdp")
    return records



def _continues(resumed: dict[str, Any], full: dict[str, Any]) -> None:
    tail = len(full["losses"]) - micro_steps_before_checkpoint()
    assert len(resumed["losses"]) == tail  # resumed mid-epoch, at the next batch
    assert_close(torch.tensor(resumed["losses"]), torch.tensor(full["losses"][-tail:]))
    assert_close(torch.tensor(resumed["lrs"]), torch.tensor(full["lrs"][SAVE_AT:]))
    assert_weights(resumed["state_dict"], full["state_dict"], **FP32)


def test_uninterrupted_fsdp_and_ddp_agree_with_one_process(grid: dict[str, dict[str, Any]]) -> None:
    assert (grid["fsdp_full"]["strategy"], grid["ddp_full"]["strategy"]) == ("fsdp", "ddp")
    for name in ("fsdp_full", "ddp_full"):
        assert_close(torch.tensor(grid[name]["losses"]), torch.tensor(grid["single_full"]["losses"]))
        assert_weights(grid[name]["state_dict"], grid["single_full"]["state_dict"], **FP32)


@pytest.mark.ddp
@pytest.mark.resume
@pytest.mark.parametrize("resumed", sorted(PAIRS))
def test_checkpoint_resumes_across_fsdp_and_ddp(grid: dict[str, dict[str, Any]], resumed: str) -> None:
    _continues(grid[resumed], grid[PAIRS[resumed]])


@pytest.mark.deepspeed
@pytest.mark.resume
@run_if(deepspeed=True, why="ZeRO-3 pairs skipped")
@pytest.mark.parametrize("resumed", sorted(ZERO3_PAIRS))
def test_checkpoint_resumes_across_fsdp_and_zero3(grid: dict[str, dict[str, Any]], resumed: str) -> None:
    _continues(grid[resumed], grid[ZERO3_PAIRS[resumed]])


@pytest.mark.deepspeed
@run_if(deepspeed=True, why="ZeRO-3 runs skipped")
def test_zero3_after_fsdp_in_the_same_launch_is_unaffected(grid: dict[str, dict[str, Any]]) -> None:
    assert grid["zero3_full"]["strategy"] == "zero3"
    assert_close(torch.tensor(grid["zero3_full"]["losses"]), torch.tensor(grid["single_full"]["losses"]))
    assert_weights(grid["zero3_full"]["state_dict"], grid["single_full"]["state_dict"], **FP32)


def test_fsdp_checkpoint_is_the_neutral_format(shared_launch_out: Path) -> None:
    import json

    from safetensors.torch import load_file

    from accelerate_core.checkpoint import layout

    fsdp, ddp = shared_launch_out / "grid" / "ckpt_fsdp", shared_launch_out / "grid" / "ckpt_ddp"
    manifest = json.loads((fsdp / "manifest.json").read_text())
    assert manifest["writer"]["strategy"] == "fsdp" and manifest["writer"]["world_size"] == 2
    assert {p.name for p in fsdp.iterdir()} == {p.name for p in ddp.iterdir()}  # the same files
    # Saved at the same step of the same run: the same optimizer document, keyed by name, and
    # full-shape fp32 state (not this rank's shard) that agrees with DDP's.
    documents = [json.loads((d / layout.optimizer_json_file(0)).read_text()) for d in (fsdp, ddp)]
    assert documents[0] == documents[1]
    tensors = [load_file(str(d / layout.optimizer_tensors_file(0))) for d in (fsdp, ddp)]
    assert tensors[0].keys() == tensors[1].keys()
    for key, value in tensors[0].items():
        assert value.shape == tensors[1][key].shape and value.dtype == tensors[1][key].dtype, key
        assert_close(value, tensors[1][key], **FP32)
