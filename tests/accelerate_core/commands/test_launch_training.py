"""The MISSION loop launched by `accelerate-core launch`, compared with plain PyTorch.

The script builds `Accelerator()` with no arguments, so the backend it runs on proves that the
launch flags reached it through the environment. The reference is computed here, in this
process, by mission_parts.reference (plain torch, one process, the global batch).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from accelerate_core.imports import is_deepspeed_available
from tests.accelerate_core.commands.cli_helpers import SCRIPTS, cli_environ, describe, run_cli

sys.path.insert(0, str(SCRIPTS))
import mission_parts  # lives beside the script it serves

WORLD = 2


def launch_mission(tmp_path: Path, flags: list[str]) -> dict[str, object]:
    out = tmp_path / "result.pt"
    result = run_cli(["launch", "--cpu", "--num-processes", str(WORLD), *flags,
                      str(SCRIPTS / "mission_noargs.py"), str(out)],
                     cli_environ(tmp_path / "cfg"), timeout=300)
    assert result.returncode == 0, describe(result)
    produced: dict[str, object] = torch.load(out, weights_only=False)
    return produced


def assert_same_as_plain_pytorch(produced: dict[str, object]) -> None:
    expected = mission_parts.reference(WORLD)
    initial = mission_parts.build(mission_parts.BATCH_PER_RANK)[0].state_dict()
    state = produced["state_dict"]
    assert isinstance(state, dict) and set(state) == set(expected["state_dict"])
    for name, weight in expected["state_dict"].items():
        # Training moved every tensor well beyond the tolerance, so agreement is not trivial.
        assert (weight - initial[name]).abs().max() > 1e-2, name
        torch.testing.assert_close(state[name], weight, atol=1e-5, rtol=1e-5, msg=name)
    torch.testing.assert_close(produced["predictions"], expected["predictions"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(produced["labels"], expected["labels"], atol=0, rtol=0)


@pytest.mark.ddp
@pytest.mark.slow
def test_mission_loop_under_ddp_matches_plain_pytorch(tmp_path: Path) -> None:
    produced = launch_mission(tmp_path, ["--backend", "ddp"])
    assert (produced["num_processes"], produced["backend"], produced["device"]) == (WORLD, "ddp", "cpu")
    assert_same_as_plain_pytorch(produced)


@pytest.mark.deepspeed
@pytest.mark.slow
@pytest.mark.skipif(not is_deepspeed_available(), reason="deepspeed is not installed")
def test_mission_loop_under_deepspeed_zero2_matches_plain_pytorch(tmp_path: Path) -> None:
    produced = launch_mission(tmp_path, ["--backend", "deepspeed", "--zero-stage", "2"])
    resolved = (produced["num_processes"], produced["backend"], produced["strategy"])
    assert resolved == (WORLD, "deepspeed", "zero2")
    assert_same_as_plain_pytorch(produced)
