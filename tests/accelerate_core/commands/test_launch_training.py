"""The user loop launched by `accelerate-core launch`, compared with plain PyTorch.

The script builds `Accelerator()` with no arguments, so the backend it runs on proves that the
launch flags reached it through the environment. The reference is computed here, in this
process, by mission_parts.reference (plain torch, one process, the global batch).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tests.accelerate_core.commands.cli_helpers import (
    SCRIPTS,
    cli_environ,
    describe,
    run_cli,
    run_cli_in_process,
)
from tests.run_if import run_if

sys.path.insert(0, str(SCRIPTS))
import mission_parts  # lives beside the script it serves

# Its outcome depends on whether deepspeed is installed: tests(nodeepspeed) runs it too.
pytestmark = pytest.mark.nodeepspeed

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
@run_if(deepspeed=True)
def test_mission_loop_under_deepspeed_zero2_matches_plain_pytorch(tmp_path: Path) -> None:
    produced = launch_mission(tmp_path, ["--backend", "deepspeed", "--zero-stage", "2"])
    resolved = (produced["num_processes"], produced["backend"], produced["strategy"])
    assert resolved == (WORLD, "deepspeed", "zero2")
    assert_same_as_plain_pytorch(produced)


@pytest.mark.ddp
@pytest.mark.slow
def test_default_config_runs_the_fp16_mission_script_and_a_chosen_precision_binds(tmp_path: Path) -> None:
    """`config --default` leaves precision to the script: the user loop's Accelerator(fp16=True) runs
    (autocast + GradScaler under DDP on CPU). A precision the user did choose still binds."""
    config = tmp_path / "default.yaml"
    env = cli_environ(tmp_path / "cfg")
    # Written in this process (main(argv): the file is what matters here; test_config_command.py
    # runs `config` as a process); the launches below are real.
    written = run_cli_in_process(["config", "--default", "--config-file", str(config)], env)
    assert written.returncode == 0, describe(written)
    out = tmp_path / "fp16.pt"
    result = run_cli(["launch", "--config-file", str(config), "--cpu", "--num-processes", str(WORLD),
                      str(SCRIPTS / "mission_fp16.py"), str(out)], env, timeout=300)
    assert result.returncode == 0, describe(result)
    produced = torch.load(out, weights_only=False)
    resolved = (produced["num_processes"], produced["backend"], produced["mixed_precision"],
                produced["gradient_accumulation_steps"], produced["device"])
    assert resolved == (WORLD, "ddp", "fp16", 1, "cpu")
    # It trained: every weight finite and moved (fp16 skips some steps while the scale settles).
    initial = mission_parts.build(mission_parts.BATCH_PER_RANK)[0].state_dict()
    for name, weight in produced["state_dict"].items():
        assert torch.isfinite(weight).all() and (weight - initial[name]).abs().max() > 1e-3, name
    batches = mission_parts.TRAIN_SAMPLES // (mission_parts.BATCH_PER_RANK * WORLD)
    optimizer_steps = mission_parts.EPOCHS * -(-batches // mission_parts.GRADIENT_ACCUMULATION_STEPS)
    assert produced["skipped_steps"] < optimizer_steps, produced["skipped_steps"]

    # The same script under a config whose precision was chosen ("no", as older files say): the
    # contradiction stops the run with the core's explanation (one process: no torchrun needed).
    chosen = tmp_path / "chosen.yaml"
    chosen.write_text('version: 1\ncpu: true\nmixed_precision: "no"\n', encoding="utf-8")
    refused = run_cli(["launch", "--config-file", str(chosen), str(SCRIPTS / "mission_fp16.py"),
                       str(tmp_path / "never.pt")], env, timeout=120)
    assert refused.returncode != 0, describe(refused)
    assert "ConflictingSettingsError" in refused.stderr, describe(refused)
    assert "the launcher was told mixed_precision='no'" in refused.stderr, describe(refused)
    assert not (tmp_path / "never.pt").exists()
