"""save_state at optimizer step k, load_state in a fresh 2-rank launch, continue: the result is
the uninterrupted run's, bit for bit (same weights, losses, learning rates and loss scales).

fp16 with an overflow injected before the checkpoint, so the loss scale being restored (32768)
differs from a fresh scaler's (65536) and a checkpoint that forgot the scaler would show.
The checkpoint falls mid-epoch in the second epoch, so the dataloader epoch and position matter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.accelerate_core.conftest import MISSION, run_mission
from tests.distributed_helpers import run_distributed

# nodeepspeed: save_state / load_state without deepspeed installed (tests(nodeepspeed) runs it too).
pytestmark = [pytest.mark.nodeepspeed, pytest.mark.ddp, pytest.mark.fp16, pytest.mark.slow]

SAVE_AT = 7  # optimizer steps: 5 per epoch, so step 7 is inside the second epoch
COMMON = ("--mixed-precision", "fp16", "--inject-overflow-step", "2")


def test_resume_from_save_state_equals_uninterrupted_run(tmp_path: Path) -> None:
    full = run_mission(tmp_path / "full", *COMMON)
    state_dir = tmp_path / "checkpoint"
    run_distributed(
        MISSION,
        2,
        ["--cpu", *COMMON, "--save-state-at", str(SAVE_AT), "--state-dir", str(state_dir)],
        timeout=240,
    )
    assert (state_dir / "manifest.json").exists() and (state_dir / "rng_rank1.safetensors").exists()
    assert not list(state_dir.glob("*.pt"))  # the neutral format: safetensors and JSON only
    resumed = run_mission(tmp_path / "resumed", *COMMON, "--resume-from", str(state_dir))

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
