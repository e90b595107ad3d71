"""save_state at optimizer step k, load_state in a fresh 2-rank launch, continue: the result is
the uninterrupted run's, bit for bit (same weights, losses, learning rates and loss scales).

fp16 with an overflow injected before the checkpoint, so the loss scale being restored (32768)
differs from a fresh scaler's (65536) and a checkpoint that forgot the scaler would show.
The checkpoint falls mid-epoch in the second epoch, so the dataloader epoch and position matter.

The checkpointed run and then the uninterrupted one are this module's part of the session's
shared 2-rank launch (shared_launch.py; early in it, before any other training), each with a
fresh Accelerator freed afterwards. The resumed run loads the checkpoint in a launch of its own,
so nothing but the checkpoint carries over into it. If either launch fails, the test fails with
its output.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.accelerate_core.conftest import Mission, mission_records, mission_scenario, run_missions
from tests.accelerate_core.shared_launch import LaunchPart, Scenario

# nodeepspeed: save_state / load_state without deepspeed installed (tests(nodeepspeed) runs it too).
pytestmark = [pytest.mark.nodeepspeed, pytest.mark.ddp, pytest.mark.fp16, pytest.mark.slow]

SAVE_AT = 7  # optimizer steps: 5 per epoch, so step 7 is inside the second epoch
COMMON = ("--mixed-precision", "fp16", "--inject-overflow-step", "2")


FULL = Mission("full", COMMON)


def checkpointed_then_full(out: Path, fixtures: frozenset[str]) -> list[Scenario]:
    """The run that stops after save_state at SAVE_AT (into out/checkpoint), then the whole run."""
    save = Mission("save", (*COMMON, "--save-state-at", str(SAVE_AT), "--state-dir", str(out / "checkpoint")),
                   writes_record=False)
    return [mission_scenario(out, save), mission_scenario(out, FULL)]


SHARED_LAUNCH = LaunchPart(scenarios=checkpointed_then_full, timeout=240, order=-2)


def test_resume_from_save_state_equals_uninterrupted_run(shared_launch_out: Path, tmp_path: Path) -> None:
    state_dir = shared_launch_out / "checkpoint"
    full = mission_records(shared_launch_out, [FULL])["full"]
    assert (state_dir / "manifest.json").exists() and (state_dir / "rng_rank1.safetensors").exists()
    assert not list(state_dir.glob("*.pt"))  # the neutral format: safetensors and JSON only
    resumed = run_missions(tmp_path, [Mission("resumed", (*COMMON, "--resume-from", str(state_dir)))],
                           timeout=240)["resumed"]

    assert full["loss_scales"][SAVE_AT - 1] == 32768.0  # the overflow at step 2 halved it
    tail = len(resumed["skipped"])
    assert tail == len(full["skipped"]) - SAVE_AT
    assert resumed["loss_scales"] == full["loss_scales"][SAVE_AT:]
    assert resumed["lrs"] == full["lrs"][SAVE_AT:]
    assert resumed["losses"] == full["losses"][-len(resumed["losses"]) :]
    full_state = torch.load(full["model_path"], weights_only=True)
    resumed_state = torch.load(resumed["model_path"], weights_only=True)
    for key, value in full_state.items():
        torch.testing.assert_close(resumed_state[key], value, rtol=0, atol=0)
    torch.testing.assert_close(resumed["metric_predictions"], full["metric_predictions"], rtol=0, atol=0)
