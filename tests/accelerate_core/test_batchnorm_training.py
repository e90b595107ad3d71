"""BatchNorm through the core on 2 real CPU ranks: DDP and DeepSpeed ZeRO 1/2/3, fp32/bf16/fp16,
plain and synchronised (`Accelerator(sync_batchnorm=True)`), against plain-PyTorch loops.

Every check of scripts/batchnorm_checks.py runs in turn, as this module's part of the session's
shared 2-rank launch (shared_launch.py; if it fails, every test here fails with its output).
The references are computed
here by plain PyTorch (the script's `single_process_reference` and `per_rank_reference` import
nothing from accelerate_core):

- synchronised: the statistics are those of the global batch, so 2 ranks must reproduce one
  process training on the whole batch: per-step losses, averaged gradients, final weights,
  running_mean / running_var (and num_batches_tracked), eval outputs, at fp32 tolerance.
- plain: each rank normalises its half of the batch with its own half-batch statistics (and
  updates its own running statistics from them), which is a different computation from the
  single-process one, not a rounding difference: the run must match the per-rank reference and
  differ from the single-process one by far more than any tolerance.
- half precision under DeepSpeed: the engine casts BatchNorm's weight and bias to half while its
  running statistics stay fp32, which crashed every forward before the core presented them as
  fp32 (strategies/deepspeed/batchnorm.py). The runs must match torch.autocast (+ GradScaler
  for fp16) on the same computation at the half-precision tolerances of
  test_deepspeed_training.py (bf16: 5e-2; fp16: rtol 1e-2 / atol 2e-3, DeepSpeed holding
  gradients in fp16 where amp keeps fp32 ones).

fp16 on CPU: DeepSpeed runs it natively where oneDNN has native fp16, else through the core's
labelled emulation (opted into by the script); the record says which ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from tests.accelerate_core.scripts.batchnorm_checks import (
    STEPS,
    per_rank_reference,
    single_process_reference,
)
from tests.accelerate_core.shared_launch import LaunchPart, Scenario
from tests.cpu_paths import NATIVE_FP16_HERE
from tests.run_if import run_if

pytestmark = [
    pytest.mark.deepspeed,
    pytest.mark.ddp,
    pytest.mark.slow,
    run_if(deepspeed=True, why="DeepSpeed tests skipped"),
]

WORLD = 2
STRATEGIES = ("ddp", "zero1", "zero2", "zero3")
ZERO = ("zero1", "zero2", "zero3")
HALF = ("bf16", "fp16")


@dataclass(frozen=True)
class Tol:
    rtol: float
    atol: float


TOL = {"no": Tol(rtol=1.3e-6, atol=1e-5), "bf16": Tol(rtol=5e-2, atol=5e-2),
       "fp16": Tol(rtol=1e-2, atol=2e-3)}

CHECKS = (
    [f"{s}:no:sync" for s in STRATEGIES] + [f"{s}:no:plain" for s in STRATEGIES]
    + [f"{s}:{p}:plain" for s in ZERO for p in HALF]
    + [f"{s}:{p}:sync" for s in STRATEGIES for p in HALF]
)


SHARED_LAUNCH = LaunchPart(
    scenarios=lambda out, fixtures: [Scenario("checks", "tests.accelerate_core.scripts.batchnorm_checks",
                                    ("--out", str(out), "--checks", ",".join(CHECKS)))],
    needs_deepspeed=True, timeout=600)


@pytest.fixture(scope="module")
def records(shared_launch_out: Path) -> Path:
    return shared_launch_out


_references: dict[tuple[str, str], dict[str, Any]] = {}


def reference(kind: str, precision: str) -> dict[str, Any]:
    if (kind, precision) not in _references:
        make = single_process_reference if kind == "single" else per_rank_reference
        _references[(kind, precision)] = make(WORLD, precision)
    return _references[(kind, precision)]


def load(out: Path, strategy: str, precision: str, mode: str) -> dict[str, Any]:
    record: dict[str, Any] = torch.load(out / f"{strategy}_{precision}_{mode}.pt", weights_only=False)
    return record


def close(actual: torch.Tensor, expected: torch.Tensor, tol: Tol, what: str) -> None:
    assert_close(actual.float(), expected.float(), rtol=tol.rtol, atol=tol.atol,
                 msg=lambda m: f"{what}: {m}")


def assert_matches(record: dict[str, Any], ref: dict[str, Any], tol: Tol,
                   eval_rows: int | None = None) -> None:
    """Losses of every rank at every step, each step's averaged gradients (fp32 runs; see the
    script's _momentum_buffers), the full state dict (weights AND buffers), eval outputs (the
    first `eval_rows`, or all)."""
    assert record["losses"].shape == ref["losses"].shape == (STEPS, WORLD)
    close(record["losses"], ref["losses"], tol, "per-step losses")
    assert len(record["grads"]) == (STEPS if tol is TOL["no"] else 0)
    for step, (got, want) in enumerate(zip(record["grads"], ref["grads"], strict=False)):
        for name, expected in want.items():
            close(got[name], expected, tol, f"gradient of {name} at step {step}")
    assert set(record["state_dict"]) == set(ref["state_dict"])
    for name, expected in ref["state_dict"].items():
        close(record["state_dict"][name], expected, tol, name)
    rows = slice(None) if eval_rows is None else slice(0, eval_rows)
    close(record["eval"][rows], ref["eval"][rows], tol, "eval outputs")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_sync_batchnorm_matches_one_process_on_the_whole_batch(records: Path, strategy: str) -> None:
    record = load(records, strategy, "no", "sync")
    assert record["strategy"] == strategy and record["world"] == WORLD
    assert record["batchnorm_layers"] == (0, 1)  # the layer was converted
    assert_matches(record, reference("single", "no"), TOL["no"])
    # Both ranks hold the same running statistics: the global ones, also in the state dict.
    stats = record["rank_stats"]
    assert torch.equal(stats[0], stats[1])
    state = record["state_dict"]
    assert torch.equal(stats[0], torch.cat([state["net.1.running_mean"], state["net.1.running_var"]]))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_plain_batchnorm_uses_per_rank_statistics(records: Path, strategy: str) -> None:
    record = load(records, strategy, "no", "plain")
    assert record["batchnorm_layers"] == (1, 0)  # sync_batchnorm is off by default
    # Exactly the per-rank computation (rank 0's running statistics in the state dict). Eval:
    # DDP broadcasts rank 0's buffers at every forward (broadcast_buffers), so rank 1 evaluates
    # with rank 0's statistics there; only rank 0's outputs are the per-rank reference's.
    eval_rows = 4 if strategy == "ddp" else None
    assert_matches(record, reference("per_rank", "no"), TOL["no"], eval_rows=eval_rows)
    # ... which is not the single-process one: from the first step, by far more than rounding.
    single = reference("single", "no")
    assert (record["losses"][0] - single["losses"][0]).abs().max() > 1e-2
    gap = (record["state_dict"]["net.1.running_var"] - single["state_dict"]["net.1.running_var"]).abs().max()
    assert gap > 1e-2


@pytest.mark.parametrize("precision", HALF)
@pytest.mark.parametrize("strategy", ZERO)
def test_plain_batchnorm_trains_under_deepspeed_half_precision(records: Path, strategy: str,
                                                                precision: str) -> None:
    # Crashed with "expected scalar type Half/BFloat16 but found Float" before the fix.
    record = load(records, strategy, precision, "plain")
    assert not any(record["overflows"])
    assert record["emulated"] is (precision == "fp16" and not NATIVE_FP16_HERE)
    assert_matches(record, reference("per_rank", precision), TOL[precision])
    # The engine really computed in half precision: not the fp32 numbers.
    assert (record["losses"] - reference("per_rank", "no")["losses"]).abs().max() > 1e-5


@pytest.mark.parametrize("precision", HALF)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_sync_batchnorm_under_half_precision_matches_autocast_on_the_whole_batch(
    records: Path, strategy: str, precision: str
) -> None:
    record = load(records, strategy, precision, "sync")
    assert record["batchnorm_layers"] == (0, 1)
    assert not any(record["overflows"])
    assert_matches(record, reference("single", precision), TOL[precision])
    assert torch.equal(record["rank_stats"][0], record["rank_stats"][1])
