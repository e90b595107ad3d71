"""examples/train.py, the user loop of docs/the-user-loop.md, runs unchanged through
`accelerate-core launch` on one process, on two with DDP and under DeepSpeed ZeRO-3, and every
backend saves the same full state dict (fp32, so to torch.testing's fp32 tolerance). The
one-process run they are compared with is launched once for the module: three launches in all.

FSDP2 is not repeated here: at fp32 its weights equal DDP's, so this comparison could not tell
that it ran. tests/accelerate_core/commands/test_fsdp_launch.py launches the user loop with
`--backend fsdp` and checks both what ran (read back from the Accelerator) and the numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from tests.accelerate_core.commands.cli_helpers import cli_environ, describe, run_cli
from tests.distributed_helpers import REPO_ROOT
from tests.run_if import run_if

EXAMPLE = REPO_ROOT / "examples" / "train.py"
# (launch flags, per-process batch): two processes with batch 4 train like one with batch 8.
BACKENDS = {
    "single": (["--num-processes", "1"], 8),
    "ddp": (["--num-processes", "2", "--backend", "ddp"], 4),
    "zero3": (["--num-processes", "2", "--backend", "deepspeed", "--zero-stage", "3"], 4),
}

pytestmark = pytest.mark.slow


def _train(tmp_path: Path, name: str) -> dict[str, torch.Tensor]:
    out = tmp_path / f"{name}.pt"
    flags, batch = BACKENDS[name]
    result = run_cli(["launch", "--cpu", *flags, str(EXAMPLE), "--out", str(out), "--batch-size", str(batch)],
                     cli_environ(tmp_path / name), timeout=300)
    assert result.returncode == 0, describe(result)
    assert "eval accuracy" in result.stdout and result.stdout.count("eval accuracy") == 1  # main only
    state: dict[str, torch.Tensor] = torch.load(out, weights_only=True)
    return state


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """The one-process run (batch 8) every backend is compared with; a failed launch fails every
    test that compares with it, with its output."""
    return _train(tmp_path_factory.mktemp("examples"), "single")


@pytest.mark.ddp
def test_the_example_gives_the_same_weights_on_one_process_and_under_ddp(
        tmp_path: Path, single: dict[str, torch.Tensor]) -> None:
    ddp = _train(tmp_path, "ddp")
    assert set(single) == {"body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias"}
    assert_close(ddp, single, rtol=1.3e-6, atol=1e-5)


@pytest.mark.deepspeed
@run_if(deepspeed=True)
def test_the_example_under_zero3_saves_the_full_weights(
        tmp_path: Path, single: dict[str, torch.Tensor]) -> None:
    zero3 = _train(tmp_path, "zero3")
    assert {k: v.shape for k, v in zero3.items()} == {k: v.shape for k, v in single.items()}
    assert_close(zero3, single, rtol=1.3e-6, atol=1e-5)
