"""`accelerate-core launch --backend fsdp` on 2 CPU ranks, the real CLI and torchrun: the user
loop in a script that builds `Accelerator()` with no arguments, so FSDP reaches it only through
the launcher. Compared with plain PyTorch computed here (mission_parts.reference)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.accelerate_core.commands.test_launch_training import (
    WORLD,
    assert_same_as_plain_pytorch,
    launch_mission,
    mission_parts,
)

# FSDP is part of torch: the same outcome with and without deepspeed, so tests(deepspeed) runs it
# once (the deepspeed-absent environment trains FSDP2 through its matrix cells).
pytestmark = [pytest.mark.fsdp, pytest.mark.slow]


def test_mission_loop_under_fsdp_matches_plain_pytorch(tmp_path: Path) -> None:
    produced = launch_mission(tmp_path, ["--backend", "fsdp"])
    resolved = (produced["num_processes"], produced["backend"], produced["strategy"], produced["device"])
    assert resolved == (WORLD, "fsdp", "fsdp", "cpu")
    assert_same_as_plain_pytorch(produced)
    # The full state dict the script saved loads into the user's plain module, every key in place.
    plain = mission_parts.build(mission_parts.BATCH_PER_RANK)[0]
    state = produced["state_dict"]
    assert isinstance(state, dict)
    plain.load_state_dict(state, strict=True)
