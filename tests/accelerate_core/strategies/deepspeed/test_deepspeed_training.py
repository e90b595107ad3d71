"""DeepSpeed ZeRO 1/2/3 on real CPU ranks (gloo) against a plain-PyTorch loop.

Start-up, not training, is the cost of a launch, so few of them: every 2-rank check of
scripts/deepspeed_checks.py runs in turn as this module's part of the session's shared 2-rank
launch (shared_launch.py), the 1-rank checks in a launch of 1 rank. The fp16 paths without native
fp16 (emulation and refusal) join the shared launch on a CPU without native fp16, where capping
oneDNN below it changes nothing; on a CPU with it, the cap is what reaches those paths, and it
acts only on a process started with it, so they keep a 2-rank launch of their own, capped. If a
launch fails, every test reading it fails with its output.

Each check is an Accelerator running the user loop (docs/the-user-loop.md) unchanged; the
references are computed here by `plain_reference`, a plain PyTorch loop that imports nothing
from accelerate_core.

Tolerances: fp32 is torch.testing's fp32 default (rtol 1.3e-6, atol 1e-5). bf16 is the issue's
5e-2 (measured: about 1.4e-3 on weights). fp16 runs through the opt-in CPU emulation and is
compared with torch.autocast + GradScaler: DeepSpeed's fp16 engine holds and accumulates the
gradients in fp16 where amp keeps them in fp32, so they differ by fp16 rounding of gradients
(measured: about 2.5e-4 on weights, 1e-4 on losses); atol 2e-3 / rtol 1e-2 leaves room for that
and nothing else. That same difference means that DeepSpeed fp16 overflows at a smaller
gradient x loss-scale than amp: the task's targets are sized so that neither overflows on its
own, and both must skip exactly the injected step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from tests.accelerate_core.conftest import SCRIPTS
from tests.accelerate_core.scripts.deepspeed_checks import (
    CLIP,
    EPOCHS,
    TinyRegressor,
    make_objects,
    plain_reference,
)
from tests.accelerate_core.shared_launch import LaunchPart, Scenario
from tests.cpu_paths import NATIVE_FP16_HERE, WITHOUT_NATIVE_FP16
from tests.distributed_helpers import run_distributed
from tests.run_if import run_if

pytestmark = [
    pytest.mark.deepspeed,
    pytest.mark.slow,
    run_if(deepspeed=True, why="DeepSpeed tests skipped"),
]

SCRIPT = SCRIPTS / "deepspeed_checks.py"
STAGES = (1, 2, 3)
CLIP_STAGES = (1, 3)
OFFLOAD_STAGES = (2, 3)
INJECTED_STEP = 1


@dataclass(frozen=True)
class Tol:
    rtol: float
    atol: float


FP32 = Tol(rtol=1.3e-6, atol=1e-5)
BF16 = Tol(rtol=5e-2, atol=5e-2)
FP16 = Tol(rtol=1e-2, atol=2e-3)


def close(actual: torch.Tensor, expected: torch.Tensor, tol: Tol, what: str = "") -> None:
    assert_close(actual, expected, rtol=tol.rtol, atol=tol.atol, msg=lambda m: f"{what}: {m}")
FP16_CHECKS = [f"fp16:{s}" for s in STAGES]
TWO_RANK_CHECKS = (
    [f"train:{s}:no" for s in STAGES] + [f"train:{s}:bf16" for s in STAGES]
    # fp16 on this CPU as it is: the native path, where there is one (else the launch below
    # covers the emulation)
    + (FP16_CHECKS if NATIVE_FP16_HERE else []) + [f"resume:{s}" for s in STAGES]
    + [f"clip:{s}" for s in CLIP_STAGES] + ["clipcall:2"] + [f"offload:{s}" for s in OFFLOAD_STAGES]
    + ["linear:3", "micro_steps:2", "prepare_errors"]
)
# With oneDNN capped below native fp16 (a no-op on a CPU without it): the emulation, opted into,
# and the refusal without the opt-in, on every machine.
NO_NATIVE_FP16_CHECKS = [*FP16_CHECKS, "fp16_refused"]
ONE_RANK_CHECKS = [f"train:{s}:no" for s in STAGES]


def _arguments(out: Path, checks: list[str]) -> list[str]:
    return ["--out", str(out), "--checks", ",".join(checks), "--inject-overflow-step", str(INJECTED_STEP)]


def _launch(out: Path, nproc: int, checks: list[str], env: dict[str, str] | None = None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    run_distributed(SCRIPT, nproc, _arguments(out, checks), env=env, timeout=600)
    return out


def shared_checks(out: Path, fixtures: frozenset[str]) -> list[Scenario]:
    """The checks the selected tests read: the 2-rank ones (`two_ranks`), and the fp16 paths
    without native fp16 (`two_ranks_without_native_fp16`) where the cap would change nothing
    (this CPU has no native fp16); misuse last, as it waits out its 3 s timeout."""
    checks = list(TWO_RANK_CHECKS) if "two_ranks" in fixtures else []
    if "two_ranks_without_native_fp16" in fixtures and not NATIVE_FP16_HERE:
        checks += NO_NATIVE_FP16_CHECKS
    if "two_ranks" in fixtures:
        checks.append("misuse:3")
    if not checks:
        return []
    return [Scenario("checks", "tests.accelerate_core.scripts.deepspeed_checks", _arguments(out, checks))]


# order 1: late in the launch, as its last check (misuse) leaves a timed-out collective behind it.
SHARED_LAUNCH = LaunchPart(scenarios=shared_checks, needs_deepspeed=True, timeout=600, order=1)


@pytest.fixture(scope="module")
def two_ranks(shared_launch_out: Path) -> Path:
    return shared_launch_out


@pytest.fixture(scope="module")
def two_ranks_without_native_fp16(request: pytest.FixtureRequest,
                                  tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not NATIVE_FP16_HERE:  # its checks ran in the shared launch (shared_checks)
        return Path(request.getfixturevalue("shared_launch_out"))
    return _launch(tmp_path_factory.mktemp("ds2-no-native-fp16"), 2, NO_NATIVE_FP16_CHECKS,
                   env=WITHOUT_NATIVE_FP16)


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _launch(tmp_path_factory.mktemp("ds1"), 1, ONE_RANK_CHECKS)


_references: dict[tuple[int, str, int | None, float | None], dict[str, Any]] = {}


def reference(world: int, precision: str = "no", inject: int | None = None,
              clip: float | None = None) -> dict[str, Any]:
    key = (world, precision, inject, clip)
    if key not in _references:
        _references[key] = plain_reference(world, precision, inject, clip)
    return _references[key]


def load(out: Path, check: str) -> dict[str, Any]:
    record: dict[str, Any] = torch.load(out / f"{check.replace(':', '_')}.pt", weights_only=False)
    return record


def assert_matches(record: dict[str, Any], ref: dict[str, Any], tol: Tol) -> None:
    assert record["losses"].shape == ref["losses"].shape  # every micro step of every rank
    close(record["losses"], ref["losses"], tol, "per-step losses")
    close(record["eval"], ref["eval"], tol, "gathered eval outputs")
    assert set(record["state_dict"]) == set(ref["state_dict"])
    for key, expected in ref["state_dict"].items():
        close(record["state_dict"][key], expected.float(), tol, key)
    assert record["lr"] == pytest.approx(ref["lr"])


@pytest.mark.parametrize("stage", STAGES)
def test_fp32_matches_plain_pytorch_on_two_ranks(two_ranks: Path, stage: int) -> None:
    record = load(two_ranks, f"train:{stage}:no")
    assert record["world"] == 2 and record["emulated"] is False
    assert not any(record["overflows"])
    assert record["unwrapped_type"] == "TinyRegressor"  # unwrap_model gives the user's module
    assert_matches(record, reference(2), FP32)


@pytest.mark.bf16
@pytest.mark.parametrize("stage", STAGES)
def test_bf16_within_documented_tolerance(two_ranks: Path, stage: int) -> None:
    record = load(two_ranks, f"train:{stage}:bf16")
    assert_matches(record, reference(2, "bf16"), BF16)
    # The engine really computed in bf16: its losses are not the fp32 ones.
    assert (record["losses"] - reference(2)["losses"]).abs().max() > 1e-5


def _assert_fp16_skips_the_injected_overflow(record: dict[str, Any]) -> None:
    ref = reference(2, "fp16", INJECTED_STEP)
    expected = [step == INJECTED_STEP for step in range(len(ref["overflows"]))]
    assert ref["overflows"] == expected  # the amp reference skips exactly the injected step ...
    assert record["overflows"] == expected  # ... and so does the engine, through is_overflow
    scales = record["loss_scales"]
    assert scales[INJECTED_STEP] == scales[INJECTED_STEP - 1] / 2  # dynamic loss scale backed off
    assert_matches(record, ref, FP16)  # includes the lr: the scheduler skipped that step too


@pytest.mark.fp16
@pytest.mark.numerics
@run_if(native_fp16=True)
@pytest.mark.parametrize("stage", STAGES)
def test_fp16_native_path_reports_injected_overflow_and_skips_the_step(two_ranks: Path, stage: int) -> None:
    record = load(two_ranks, f"fp16:{stage}")
    assert record["emulated"] is False  # path: native (DeepSpeed's own CPU accelerator ran fp16)
    _assert_fp16_skips_the_injected_overflow(record)


@pytest.mark.fp16
@pytest.mark.numerics
@pytest.mark.parametrize("stage", STAGES)
def test_fp16_emulation_path_reports_injected_overflow_and_skips_the_step(
    two_ranks_without_native_fp16: Path, stage: int
) -> None:
    record = load(two_ranks_without_native_fp16, f"fp16:{stage}")
    assert record["native"] is False  # path: no native fp16 (this CPU's, or oneDNN capped below it)
    assert record["emulated"] is True  # the opt-in emulation ran, and the harness labels it
    _assert_fp16_skips_the_injected_overflow(record)


@pytest.mark.parametrize("stage", CLIP_STAGES)
def test_gradient_clipping_matches_torch_clip_grad_norm(two_ranks: Path, stage: int) -> None:
    # DeepSpeedPlugin(gradient_clipping=c) clips inside the engine's step exactly as
    # torch.nn.utils.clip_grad_norm_(params, c) does on the averaged gradients of a plain loop.
    record = load(two_ranks, f"clip:{stage}")
    clipped, unclipped = reference(2, clip=CLIP), reference(2)
    assert_matches(record, clipped, FP32)
    gap = max((clipped["state_dict"][k] - unclipped["state_dict"][k]).abs().max()
              for k in clipped["state_dict"])
    assert gap > 1e-3  # clipping acted, so the match above says something


def test_clip_grad_norm_in_the_loop_clips_that_step_like_torch(two_ranks: Path) -> None:
    # No clipping in the plugin; the loop calls accelerator.clip_grad_norm_(params, c) before
    # each optimizer.step(), as a plain loop calls torch.nn.utils.clip_grad_norm_.
    assert_matches(load(two_ranks, "clipcall:2"), reference(2, clip=CLIP), FP32)


@pytest.mark.parametrize("stage", OFFLOAD_STAGES)
def test_cpu_offload_with_a_torch_optimizer_matches_plain_pytorch(two_ranks: Path, stage: int) -> None:
    # offload_optimizer_device="cpu" (and offload_param_device="cpu" for ZeRO-3) keeps the
    # user's torch AdamW: the config does not let DeepSpeed swap in its own CPU Adam.
    assert_matches(load(two_ranks, f"offload:{stage}"), reference(2), FP32)


@pytest.mark.parametrize("stage", STAGES)
def test_resume_from_save_state_equals_uninterrupted(two_ranks: Path, stage: int) -> None:
    record = load(two_ranks, f"resume:{stage}")
    uninterrupted, resumed = record["uninterrupted"], record["resumed"]
    close(resumed["losses"], uninterrupted["losses"], FP32)
    for key, value in uninterrupted["state_dict"].items():
        close(resumed["state_dict"][key], value, FP32)
    # Both equal the full two-epoch plain run, so the resumed one really started from the state.
    ref = reference(2)
    for key, value in ref["state_dict"].items():
        close(resumed["state_dict"][key], value, FP32)
    assert len(resumed["losses"]) == len(ref["losses"]) // EPOCHS


def test_zero3_consolidated_state_dict_is_complete_and_loads(two_ranks: Path) -> None:
    saved = torch.load(two_ranks / "state_dict_zero3_no.pt", weights_only=True)
    fresh = TinyRegressor()
    expected = fresh.state_dict()
    assert list(saved) == list(expected)  # every key, in the module's order
    for key, tensor in expected.items():
        assert saved[key].shape == tensor.shape and saved[key].device.type == "cpu"
        assert saved[key].dtype == torch.float32
    fresh.load_state_dict(saved, strict=True)
    _, _, _, _, evaluation = make_objects(2)
    fresh.eval()
    with torch.no_grad():
        preds = torch.cat([fresh(**batch).logits for batch in evaluation])
    close(preds, load(two_ranks, "train:3:no")["eval"], FP32)


def test_zero3_bf16_state_dict_is_fp32_master_weights(two_ranks: Path) -> None:
    saved = torch.load(two_ranks / "state_dict_zero3_bf16.pt", weights_only=True)
    assert all(t.dtype == torch.float32 for t in saved.values())
    # fp32 master weights carry more than bf16's 8 bits of mantissa.
    weight = saved["encoder.0.weight"]
    assert not torch.equal(weight, weight.to(torch.bfloat16).float())


def test_get_state_dict_on_main_process_only_is_explained_not_a_hang(two_ranks: Path) -> None:
    record = load(two_ranks, "misuse:3")
    assert record["raised"] == "CollectiveMisuseError"
    assert "every rank" in record["message"] and "Fix:" in record["message"]
    assert "is_main_process" in record["message"]


def test_zero3_leaves_torch_functional_linear_as_it_was(two_ranks: Path) -> None:
    # The harness's cross-environment check found DDP cells computing differently after a
    # ZeRO-3 cell in the same process: DeepSpeed had swapped F.linear for good.
    record = load(two_ranks, "linear:3")
    assert record["swapped_by_default"] is False
    assert record["swapped_when_asked"] is True  # the check can see a swap: DeepSpeed still does it
    assert record["restored_after_teardown"] is True


def test_an_engine_that_counts_micro_steps_itself_is_refused(two_ranks: Path) -> None:
    # DeepSpeed 0.16.9-0.19.3: the loop's step() was not applied and no overflow happened.
    record = load(two_ranks, "micro_steps:2")
    assert record["raised"] == "UnsupportedDeepSpeedError"
    assert "did not apply the step" in record["message"]
    assert "managed_gradient_accumulation" in record["message"]
    assert "Fix: pip install" in record["message"]


def test_wrong_prepare_calls_are_explained(two_ranks: Path) -> None:
    record = load(two_ranks, "prepare_errors")
    assert record["twice"].startswith("UnsupportedObjectError")
    assert "single accelerator.prepare" in record["twice"]
    assert record["no_optimizer"].startswith("UnsupportedObjectError")
    assert "without an optimizer" in record["no_optimizer"]
    # One error naming every user key that disagrees with the core.
    conflicts = record["conflicts"]
    assert conflicts.startswith("ConflictingSettingsError") and "3 key(s)" in conflicts
    for key in ("train_micro_batch_size_per_gpu", "optimizer:", "zero_optimization.stage"):
        assert key in conflicts


@pytest.mark.fp16
@pytest.mark.numerics
def test_fp16_without_opt_in_is_a_specific_error(two_ranks_without_native_fp16: Path) -> None:
    record = load(two_ranks_without_native_fp16, "fp16_refused")
    assert record["native"] is False  # path: no native fp16 (this CPU's, or oneDNN capped below it)
    assert record["raised"] == "UnsupportedPrecisionError"
    for part in ("fp16", "cpu_fp16_emulation=True", "bf16", "Fix:"):
        assert part in record["message"]


@pytest.mark.parametrize("stage", STAGES)
def test_fp32_matches_plain_pytorch_on_one_rank(one_rank: Path, stage: int) -> None:
    record = load(one_rank, f"train:{stage}:no")
    assert record["world"] == 1
    assert_matches(record, reference(1), FP32)
