"""FSDP2 (`Accelerator(fsdp_plugin=FSDPPlugin())`) on 2 real CPU ranks (gloo) against plain
single-process PyTorch computed here.

This module's part of the session's shared 2-rank launch (shared_launch.py) runs, one after
another in one process group, each with a fresh Accelerator freed afterwards:
- the user loop (scripts/mission_loop.py --fsdp) in fp32, fp16 with an injected overflow, bf16;
- scripts/fsdp_checks.py: sharding evidence, clip_grad_norm_, gather, wrap policies, an
  optimizer that stepped before prepare(), tied weights, BatchNorm units under bf16.
The checkpoint grid (FSDP resumed under DDP, one process and ZeRO-3, and back) is
test_fsdp_resume_grid.py.
Tolerances: fp32 to torch's fp32 defaults (rtol 1.3e-6, atol 1e-5); fp16 within 1e-2 of the
autocast + GradScaler reference, bf16 within 5e-2 of the bf16 autocast reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from tests.accelerate_core.conftest import Mission, mission_records, mission_scenario
from tests.accelerate_core.scripts import fsdp_checks
from tests.accelerate_core.scripts.plain_reference import train_reference
from tests.accelerate_core.scripts.task import Classifier, TaskConfig
from tests.accelerate_core.shared_launch import LaunchPart, Scenario
from tests.accelerate_core.strategies.fsdp.weights import FP32, assert_weights

# FSDP is part of torch and its outcome does not depend on deepspeed being installed, so
# tests(deepspeed) runs these once; the deepspeed-absent environment
# trains FSDP2 through its matrix cells (`*-cpu2-fsdp-*`, tests/matrix).
pytestmark = [pytest.mark.fsdp, pytest.mark.slow]

OVERFLOW_STEP = 3

MISSIONS = (
    Mission("fp32", ("--fsdp",)),
    Mission("fp16", ("--fsdp", "--mixed-precision", "fp16", "--inject-overflow-step", str(OVERFLOW_STEP))),
    Mission("bf16", ("--fsdp", "--mixed-precision", "bf16")),
)


def _scenarios(out: Path, fixtures: frozenset[str]) -> list[Scenario]:
    return [
        *(mission_scenario(out, m) for m in MISSIONS),
        Scenario("checks", "tests.accelerate_core.scripts.fsdp_checks", ("--out", str(out / "checks"))),
    ]


# With the DDP-only parts (order -1): no DeepSpeed has run in the launch yet.
SHARED_LAUNCH = LaunchPart(scenarios=_scenarios, timeout=300, order=-1)


@pytest.fixture(scope="module")
def runs(shared_launch_out: Path) -> dict[str, dict[str, Any]]:
    return mission_records(shared_launch_out, MISSIONS)


def _check(shared_launch_out: Path, name: str, rank: int = 0) -> dict[str, Any]:
    record: dict[str, Any] = torch.load(shared_launch_out / "checks" / f"{name}.rank{rank}.pt",
                                        weights_only=False)
    return record


# -- the user loop ---------------------------------------------------------------------------------
def test_fp32_matches_plain_pytorch(runs: dict[str, dict[str, Any]]) -> None:
    run, reference = runs["fp32"], train_reference(TaskConfig(world_size=2))
    assert run["num_processes"] == 2
    assert_weights(torch.load(run["model_path"], weights_only=True), reference["state_dict"], **FP32)
    assert_close(torch.tensor(run["losses"]), torch.tensor(reference["losses"]), **FP32)
    assert run["lrs"] == pytest.approx(reference["lrs"], rel=1e-12)
    assert not any(run["skipped"])
    # gather_for_metrics: the 37 eval samples once, in order; gather: the padded 40.
    assert run["metric_predictions"].shape == (37, 4) and run["predictions"].shape == (40, 4)
    assert_close(run["metric_labels"], reference["metric_labels"], rtol=0, atol=0)
    assert_close(run["metric_predictions"], reference["metric_predictions"], **FP32)


def test_full_state_dict_loads_strictly_into_a_plain_module(runs: dict[str, dict[str, Any]]) -> None:
    run = runs["fp32"]
    fresh = Classifier()
    fresh.load_state_dict(torch.load(run["model_path"], weights_only=True), strict=True)
    assert run["unwrapped_keys"] == sorted(fresh.state_dict())
    from tests.accelerate_core.scripts.task import EVAL_DATA_SEED, SyntheticClassification

    with torch.no_grad():
        logits = fresh(SyntheticClassification(37, EVAL_DATA_SEED).x).logits
    assert_close(logits, run["metric_predictions"], **FP32)


@pytest.mark.fp16
def test_fp16_skips_the_injected_overflow_on_every_rank(runs: dict[str, dict[str, Any]]) -> None:
    run = runs["fp16"]
    reference = train_reference(TaskConfig(world_size=2, mixed_precision="fp16",
                                           inject_overflow_step=OVERFLOW_STEP))
    assert [i for i, s in enumerate(run["skipped"]) if s] == [OVERFLOW_STEP]
    assert run["skipped"] == reference["skipped"]
    params = run["params"]  # rank 0's shards
    assert torch.equal(params[OVERFLOW_STEP], params[OVERFLOW_STEP - 1])
    assert not torch.equal(params[OVERFLOW_STEP + 1], params[OVERFLOW_STEP])
    assert run["lrs"] == pytest.approx(reference["lrs"], rel=1e-12)
    scales = run["loss_scales"]  # GradScaler's rules: halved at the overflow and only there
    assert scales[OVERFLOW_STEP] == scales[OVERFLOW_STEP - 1] / 2
    assert scales == reference["loss_scales"]
    state = torch.load(run["model_path"], weights_only=True)
    assert_weights(state, reference["state_dict"], rtol=0, atol=1e-2)
    assert_close(run["metric_predictions"], reference["metric_predictions"], rtol=0, atol=1e-2)


@pytest.mark.bf16
def test_bf16_differs_from_fp32_within_bf16_tolerance(runs: dict[str, dict[str, Any]]) -> None:
    run = runs["bf16"]
    reference = train_reference(TaskConfig(world_size=2, mixed_precision="bf16"))
    fp32 = train_reference(TaskConfig(world_size=2))
    state = torch.load(run["model_path"], weights_only=True)
    assert not any(run["skipped"])
    assert_weights(state, reference["state_dict"], rtol=0, atol=5e-2)
    assert_close(run["metric_predictions"], reference["metric_predictions"], rtol=0, atol=5e-2)
    # The weights were computed in bf16 (FSDP's param_dtype), not in fp32: far beyond fp32 noise.
    differences = [(state[k] - v).abs().max().item() for k, v in fp32["state_dict"].items()]
    assert max(differences) > 1e-4, differences
    assert all(value.dtype == torch.float32 for value in state.values())  # the fp32 master weights


# -- fsdp_checks.py ------------------------------------------------------------------------------
def _plain_run(stepped_before: bool) -> dict[str, Any]:
    """fsdp_checks.py's training in one plain process on the global batch."""
    model = fsdp_checks.make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=fsdp_checks.LR)
    losses, norms = [], []
    for step in range(fsdp_checks.STEPS):
        x, y = fsdp_checks.batch(step)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if stepped_before and step == 0:  # the step taken before prepare(), unclipped
            optimizer.step()
            optimizer.zero_grad()
            continue
        losses.append(loss.item())
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), fsdp_checks.MAX_NORM)))
        optimizer.step()
        optimizer.zero_grad()
    return {"losses": losses, "norms": norms, "state_dict": model.state_dict()}


@pytest.mark.parametrize("rank", [0, 1])
def test_parameters_are_sharded_dtensors(shared_launch_out: Path, rank: int) -> None:
    record = _check(shared_launch_out, "sharding", rank)
    assert record["strategy"] == "fsdp"
    assert all(record["is_dtensor"].values()) and record["unsharded"] == []
    assert record["wrapped"] == [("2", "0", "")]  # each Linear (the Tanh holds nothing), then the root
    assert record["optimizer_holds_model_params"]  # the optimizer built before prepare() follows
    assert record["unwrapped_is_model"]


def test_local_shards_add_up_to_the_full_parameters(shared_launch_out: Path) -> None:
    ranks = [_check(shared_launch_out, "sharding", r) for r in (0, 1)]
    for name, shape in ranks[0]["full_shape"].items():
        shards = [r["local_numel"][name] for r in ranks]
        assert sum(shards) == torch.Size(shape).numel(), (name, shards)
        assert all(0 < s < torch.Size(shape).numel() for s in shards), (name, shards)  # really split


@pytest.mark.parametrize("rank", [0, 1])
def test_clip_grad_norm_returns_the_global_norm(shared_launch_out: Path, rank: int) -> None:
    record, plain = _check(shared_launch_out, "sharding", rank), _plain_run(stepped_before=False)
    assert min(plain["norms"]) > fsdp_checks.MAX_NORM  # every step clipped
    assert_close(torch.tensor(record["norms"]), torch.tensor(plain["norms"]), **FP32)
    assert_close(torch.tensor(record["losses"]), torch.tensor(plain["losses"]), **FP32)
    # get_state_dict: full plain CPU tensors on EVERY rank (as under DDP and DeepSpeed).
    assert_weights(record["state_dict"], plain["state_dict"], **FP32)


def test_gather_returns_the_global_batch(shared_launch_out: Path) -> None:
    for rank in (0, 1):
        assert torch.equal(_check(shared_launch_out, "sharding", rank)["gathered"],
                           torch.tensor([0.0, 1.0, 2.0, 10.0, 11.0, 12.0]))


def test_wrap_policies_choose_the_units(shared_launch_out: Path) -> None:
    classes, chosen = _check(shared_launch_out, "wrap_classes"), _check(shared_launch_out, "wrap_callable")
    assert classes["wrapped"] == [("1", "0.0", "")]  # every nn.Linear, innermost first, then the root
    assert chosen["wrapped"] == [("0", "")]
    assert classes["all_dtensor"] and chosen["all_dtensor"]
    assert classes["unsharded"] == chosen["unsharded"] == []
    plain = _plain_run(stepped_before=False)  # the same weights and steps, not nested
    for record in (classes, chosen):
        assert_close(torch.tensor(record["norms"]), torch.tensor(plain["norms"]), **FP32)
        assert_close(torch.tensor(record["losses"]), torch.tensor(plain["losses"]), **FP32)


def test_optimizer_state_from_before_prepare_is_sharded_and_kept(shared_launch_out: Path) -> None:
    record, plain = _check(shared_launch_out, "stepped_before"), _plain_run(stepped_before=True)
    assert record["state_is_dtensor"]
    assert_close(torch.tensor(record["norms"]), torch.tensor(plain["norms"]), **FP32)
    assert_close(torch.tensor(record["losses"]), torch.tensor(plain["losses"]), **FP32)
    assert_weights(record["state_dict"], plain["state_dict"], **FP32)


@pytest.mark.fp16
def test_an_overflow_in_one_ranks_shard_skips_the_step_on_every_rank(shared_launch_out: Path) -> None:
    ranks = [_check(shared_launch_out, "one_rank_overflow", r) for r in (0, 1)]
    for record in ranks:  # rank 0 never saw the inf: it skips because rank 1 found one
        assert record["skipped"] == [False, True, False]
        assert record["moved"] == [True, False, True]
        assert record["scales"] == [65536.0, 32768.0, 32768.0]  # GradScaler's backoff, once


def _plain_tied() -> dict[str, Any]:
    """fsdp_checks.tied's training in one plain process on the global batch: STEPS steps, the
    state then, and one more step."""
    model = fsdp_checks.make_tied()
    optimizer = torch.optim.AdamW(model.parameters(), lr=fsdp_checks.LR)
    losses, states = [], []
    for step in range(fsdp_checks.STEPS + 1):
        loss = fsdp_checks.tied_loss(model, *fsdp_checks.tied_batch(step))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    return {"losses": losses, "states": states}


@pytest.mark.parametrize("rank", [0, 1])
def test_tied_weights_stay_tied_and_train_like_plain_pytorch(shared_launch_out: Path, rank: int) -> None:
    record, plain = _check(shared_launch_out, "tied", rank), _plain_tied()
    # embed and head share their weight: both fall to the root unit, body is a unit of its own.
    assert record["wrapped"] == [("body", "")]
    assert record["tied_after_prepare"] and record["tied_after_load"]
    steps = fsdp_checks.STEPS
    assert_close(torch.tensor(record["losses"]), torch.tensor(plain["losses"][:steps]), **FP32)
    # get_state_dict: both names, as model.state_dict() of the plain model (and DDP) gives them.
    assert_weights(record["state_dict"], plain["states"][steps - 1], **FP32)
    assert torch.equal(record["state_dict"]["head.weight"], record["state_dict"]["embed.weight"])
    # load_state restored the state saved before the extra step: the step repeats exactly.
    assert record["after_load"] == record["after_save"]
    assert_close(torch.tensor(record["after_save"]), torch.tensor(plain["losses"][steps]), **FP32)
    assert_weights(record["final_state_dict"], plain["states"][steps], **FP32)


def test_tied_checkpoint_holds_both_names_as_ddp_writes_them(shared_launch_out: Path) -> None:
    from accelerate_core.checkpoint import layout

    saved = layout.read_tensors(shared_launch_out / "checks" / "tied_ckpt" / layout.model_file(0))
    assert saved.keys() == fsdp_checks.make_tied().state_dict().keys()
    assert torch.equal(saved["head.weight"], saved["embed.weight"])
    plain = _plain_tied()["states"][fsdp_checks.STEPS - 1]
    assert_close(saved["embed.weight"], plain["embed.weight"], **FP32)


def _plain_batchnorm_bf16() -> list[float]:
    """fsdp_checks.batchnorm_bf16's training in one plain process under bf16 autocast (which runs
    batch_norm in fp32), on the global batch."""
    model = fsdp_checks.make_batchnorm()
    optimizer = torch.optim.AdamW(model.parameters(), lr=fsdp_checks.LR)
    losses = []
    for step in range(fsdp_checks.STEPS):
        x, y = fsdp_checks.batch(step)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        loss = nn.functional.mse_loss(out.float(), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), fsdp_checks.MAX_NORM)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.bf16
def test_batchnorm_units_compute_in_fp32_under_bf16(shared_launch_out: Path) -> None:
    record = _check(shared_launch_out, "batchnorm_bf16")
    assert record["wrapped"] == [("0.1", "0", "")]  # the BatchNorm a unit of its own, innermost
    bf16, fp32 = "torch.bfloat16", "torch.float32"
    assert record["forward_dtypes"] == {
        "0.0:Linear": (bf16, bf16),
        # fully_shard made the SyncBatchNorm an FSDP unit (its class FSDPSyncBatchNorm); weight
        # and input fp32, like its running statistics.
        "0.1:FSDPSyncBatchNorm": (fp32, fp32),
        "0.3:Linear": (bf16, bf16),  # the BatchNorm unit handed back bf16 inside the bf16 unit
    }
    assert_close(torch.tensor(record["losses"]), torch.tensor(_plain_batchnorm_bf16()), rtol=0, atol=5e-2)
