"""Where DeepSpeed 0.19.8 alone trains differently from (or fails where) a plain loop does not, the
core reconciles it; scripts/deepspeed_reconcile.py's checks, compared here with a plain-PyTorch
loop (`plain_reference`, no accelerate_core). They run as this module's part of the session's
shared 2-rank launch (shared_launch.py); if it fails, every test here fails with its output.

- A root-owned parameter with a nested frozen-dataclass output under ZeRO-3 (DeepSpeed alone:
  "The size of tensor a (0) must match ..." in the first backward, reproduced by
  tests/harness/rank/test_loop.py) trains like plain PyTorch, and the user still gets the dataclass.
- fp32 buffers in a bf16 engine behave as under torch.autocast (the amp reference): a buffer in a
  matmul no longer fails, buffers stay fp32 and unchanged, and training matches the autocast
  reference within the documented bf16 tolerance (5e-2, as in test_deepspeed_training.py).
- 0-dim parameters under ZeRO 1-3 (DeepSpeed alone: "self.dim() cannot be 0 to view Float as
  Byte" in deepspeed.initialize, reproduced by tests/harness/rank/test_loop.py) are broadcast from
  rank 0 and train like plain PyTorch, keeping their 0-dim shape for the user and in the state dict.
- save_state called on the main process only raises CollectiveMisuseError instead of hanging.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from tests.accelerate_core.scripts.deepspeed_reconcile import make, plain_reference
from tests.accelerate_core.shared_launch import LaunchPart, Scenario
from tests.run_if import run_if

pytestmark = [
    pytest.mark.deepspeed,
    pytest.mark.slow,
    run_if(deepspeed=True, why="DeepSpeed tests skipped"),
]

CHECKS = ["rootparam:3", "buffer:2:bf16", "buffer:3:bf16", "scalar:1", "scalar:2", "scalar:3",
          "savestate_misuse:3"]  # misuse last: it waits out its 3 s timeout
FP32 = (1.3e-6, 1e-5)  # (rtol, atol): torch.testing's fp32 default
BF16 = (5e-2, 5e-2)


# order 1: late in the launch, as its last check leaves a timed-out collective behind it.
SHARED_LAUNCH = LaunchPart(
    scenarios=lambda out, fixtures: [Scenario("checks", "tests.accelerate_core.scripts.deepspeed_reconcile",
                                    ("--out", str(out), "--checks", ",".join(CHECKS)))],
    needs_deepspeed=True, timeout=300, order=1)


@pytest.fixture(scope="module")
def records(shared_launch_out: Path) -> Path:
    return shared_launch_out


def load(out: Path, check: str) -> dict[str, Any]:
    record: dict[str, Any] = torch.load(out / f"{check.replace(':', '_')}.pt", weights_only=False)
    return record


def _naming(key: str) -> Callable[[str], str]:
    return lambda message: f"{key}: {message}"


def assert_matches(record: dict[str, Any], ref: dict[str, Any], tol: tuple[float, float]) -> None:
    rtol, atol = tol
    assert record["losses"].shape == ref["losses"].shape  # every step, every rank
    assert_close(record["losses"], ref["losses"], rtol=rtol, atol=atol)
    assert list(record["state_dict"]) == list(ref["state_dict"])
    for key, expected in ref["state_dict"].items():
        assert_close(record["state_dict"][key], expected.float(), rtol=rtol, atol=atol,
                     msg=_naming(key))


def test_zero3_root_owned_parameter_with_dataclass_output_matches_plain_pytorch(records: Path) -> None:
    record = load(records, "rootparam:3")
    assert record["output_types"] == [("Out", "Inner")]  # the user's (nested) dataclasses
    ref = plain_reference("rootparam", 2)
    assert_matches(record, ref, FP32)
    # The root's own parameter really trained (the match above covers it, not a frozen value).
    start = make("rootparam", 2)[0].state_dict()["position"]
    assert (ref["state_dict"]["position"] - start).abs().max() > 1e-3


@pytest.mark.bf16
@pytest.mark.parametrize("stage", [2, 3])
def test_fp32_buffers_in_a_bf16_engine_behave_as_under_autocast(records: Path, stage: int) -> None:
    record = load(records, f"buffer:{stage}:bf16")
    # DeepSpeed alone (the same engine without the core's autocast) cannot run this forward.
    assert "same dtype" in record["without_autocast"], record["without_autocast"]
    ref = plain_reference("buffer", 2, "bf16")
    assert_matches(record, ref, BF16)
    for name in ("mix", "shift"):  # buffers keep their fp32 values, as under autocast
        assert record["state_dict"][name].dtype == torch.float32
        assert torch.equal(record["state_dict"][name], ref["state_dict"][name])
    # The engine really computed in bf16: its losses are not the fp32 ones.
    assert (record["losses"] - plain_reference("buffer", 2)["losses"]).abs().max() > 1e-5


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_dim_parameters_are_broadcast_and_train_like_plain_pytorch(records: Path, stage: int) -> None:
    record = load(records, f"scalar:{stage}")
    # The shapes the user sees after prepare() and after training: a and b stay 0-dim.
    assert record["shapes"] == [[(), (), (1, 5), (1,)]] * 2
    # Rank 1 started from other values: matching the reference means rank 0's reached it.
    ref = plain_reference("scalar", 2)
    assert_matches(record, ref, FP32)
    assert record["state_dict"]["a"].shape == torch.Size([])


def test_save_state_on_main_process_only_is_explained_not_a_hang(records: Path) -> None:
    record = load(records, "savestate_misuse:3")
    assert record["raised"] == "CollectiveMisuseError"
    message = record["message"]
    assert "accelerator.save_state(dir)" in message and "every rank" in message
    assert "Fix:" in message and "is_main_process" in message and "get_state_dict" not in message
