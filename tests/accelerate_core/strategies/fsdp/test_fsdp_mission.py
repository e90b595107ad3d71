"""FSDP2 (`Accelerator(fsdp_plugin=FSDPPlugin())`) on 2 real CPU ranks (gloo) against plain
single-process PyTorch computed here.

This module's part of the session's shared 2-rank launch (shared_launch.py) runs, one after
another in one process group, each with a fresh Accelerator freed afterwards:
- the user loop (scripts/mission_loop.py --fsdp) in fp32, fp16 with an injected overflow, bf16;
- scripts/fsdp_checks.py: sharding evidence, clip_grad_norm_, gather, wrap policies, an
  optimizer that stepped before prepare();
- scripts/fsdp_checkpoint_grid.py: save_state under FSDP resumed under DDP and back (and under
  ZeRO-3 and back where deepspeed is installed), DDP running after FSDP in the same launch (a
  later Accelerator is not affected by an earlier one).
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

from accelerate_core.imports import is_deepspeed_available
from tests.accelerate_core.conftest import Mission, mission_records, mission_scenario
from tests.accelerate_core.scripts import fsdp_checks
from tests.accelerate_core.scripts.checkpoint_task import (
    GAS,
    GLOBAL_BATCH,
    SAMPLES,
    SAVE_AT,
    prepare,
    user_loop,
)
from tests.accelerate_core.scripts.plain_reference import train_reference
from tests.accelerate_core.scripts.task import Classifier, TaskConfig
from tests.accelerate_core.shared_launch import LaunchPart, Scenario
from tests.run_if import run_if

# FSDP is part of torch and its outcome does not depend on deepspeed being installed (only the
# ZeRO-3 pair needs it), so tests(deepspeed) runs these once; the deepspeed-absent environment
# trains FSDP2 through its matrix cells (`*-cpu2-fsdp-*`, tests/matrix).
pytestmark = [pytest.mark.fsdp, pytest.mark.slow]

OVERFLOW_STEP = 3
FP32: dict[str, Any] = {"rtol": 1.3e-6, "atol": 1e-5}

MISSIONS = (
    Mission("fp32", ("--fsdp",)),
    Mission("fp16", ("--fsdp", "--mixed-precision", "fp16", "--inject-overflow-step", str(OVERFLOW_STEP))),
    Mission("bf16", ("--fsdp", "--mixed-precision", "bf16")),
)


def _single(save_dir: Path | None = None, resume_from: Path | None = None) -> dict[str, Any]:
    """checkpoint_task's user loop on one process (the single-device strategy), in this process."""
    from accelerate_core import Accelerator

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=GAS)
    model, optimizer, loader, scheduler = prepare(accelerator, 1234 + (1 if resume_from else 0))
    if resume_from is not None:
        accelerator.load_state(resume_from)
    record = user_loop(accelerator, model, optimizer, scheduler, loader, save_dir=save_dir,
                       resume=resume_from is not None)
    accelerator.free_memory()
    return record


def _single_full(out: Path) -> None:
    """Before the launch: the uninterrupted 1-process run, whose checkpoint the launch's FSDP run
    resumes from."""
    torch.save(_single(save_dir=out / "ckpt_single"), out / "single_full.pt")


def _scenarios(out: Path, fixtures: frozenset[str]) -> list[Scenario]:
    grid = ["--out", str(out / "grid"), "--single-ckpt", str(out / "ckpt_single")]
    if is_deepspeed_available():
        grid.append("--zero3")
    return [
        *(mission_scenario(out, m) for m in MISSIONS),
        Scenario("checks", "tests.accelerate_core.scripts.fsdp_checks", ("--out", str(out / "checks"))),
        Scenario("grid", "tests.accelerate_core.scripts.fsdp_checkpoint_grid", tuple(grid)),
    ]


# No DeepSpeed before the grid's last phases: with the DDP-only parts (order -1).
SHARED_LAUNCH = LaunchPart(scenarios=_scenarios, timeout=300, before=_single_full, order=-1)


@pytest.fixture(scope="module")
def runs(shared_launch_out: Path) -> dict[str, dict[str, Any]]:
    return mission_records(shared_launch_out, MISSIONS)


def _check(shared_launch_out: Path, name: str, rank: int = 0) -> dict[str, Any]:
    record: dict[str, Any] = torch.load(shared_launch_out / "checks" / f"{name}.rank{rank}.pt",
                                        weights_only=False)
    return record


def _assert_weights(state: dict[str, torch.Tensor], reference: dict[str, torch.Tensor],
                    **tolerance: Any) -> None:
    assert state.keys() == reference.keys()
    for key, value in state.items():
        assert value.device.type == "cpu" and type(value) is torch.Tensor, key  # plain, not DTensor
        try:
            assert_close(value, reference[key], **tolerance)
        except AssertionError as error:
            raise AssertionError(f"{key}: {error}") from None


# -- the user loop ---------------------------------------------------------------------------------
def test_fp32_matches_plain_pytorch(runs: dict[str, dict[str, Any]]) -> None:
    run, reference = runs["fp32"], train_reference(TaskConfig(world_size=2))
    assert run["num_processes"] == 2
    _assert_weights(torch.load(run["model_path"], weights_only=True), reference["state_dict"], **FP32)
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
    _assert_weights(state, reference["state_dict"], rtol=0, atol=1e-2)
    assert_close(run["metric_predictions"], reference["metric_predictions"], rtol=0, atol=1e-2)


@pytest.mark.bf16
def test_bf16_differs_from_fp32_within_bf16_tolerance(runs: dict[str, dict[str, Any]]) -> None:
    run = runs["bf16"]
    reference = train_reference(TaskConfig(world_size=2, mixed_precision="bf16"))
    fp32 = train_reference(TaskConfig(world_size=2))
    state = torch.load(run["model_path"], weights_only=True)
    assert not any(run["skipped"])
    _assert_weights(state, reference["state_dict"], rtol=0, atol=5e-2)
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
    _assert_weights(record["state_dict"], plain["state_dict"], **FP32)


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
    _assert_weights(record["state_dict"], plain["state_dict"], **FP32)


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
    _assert_weights(record["state_dict"], plain["states"][steps - 1], **FP32)
    assert torch.equal(record["state_dict"]["head.weight"], record["state_dict"]["embed.weight"])
    # load_state restored the state saved before the extra step: the step repeats exactly.
    assert record["after_load"] == record["after_save"]
    assert_close(torch.tensor(record["after_save"]), torch.tensor(plain["losses"][steps]), **FP32)
    _assert_weights(record["final_state_dict"], plain["states"][steps], **FP32)


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


# -- fsdp_checkpoint_grid.py ------------------------------------------------------------------------
# resumed run -> the uninterrupted run it must continue
PAIRS = {
    "ddp_from_fsdp": "ddp_full",
    "fsdp_from_ddp": "fsdp_full",
    "fsdp_from_single": "fsdp_full",
    "single_from_fsdp": "single_full",
}
ZERO3_PAIRS = {"zero3_from_fsdp": "zero3_full", "fsdp_from_zero3": "fsdp_full"}


@pytest.fixture(scope="module")
def grid(shared_launch_out: Path) -> dict[str, dict[str, Any]]:
    out = shared_launch_out / "grid"
    records = {path.stem: torch.load(path, weights_only=True) for path in out.glob("*.pt")}
    records["single_full"] = torch.load(shared_launch_out / "single_full.pt", weights_only=True)
    records["single_from_fsdp"] = _single(resume_from=out / "ckpt_fsdp")
    return records


def _micro_steps_before_checkpoint() -> int:
    per_epoch = -(-SAMPLES // GLOBAL_BATCH)
    micro, steps = 0, 0
    while steps < SAVE_AT:
        step = micro % per_epoch
        micro += 1
        if (step + 1) % GAS == 0 or step == per_epoch - 1:
            steps += 1
    return micro


def _continues(resumed: dict[str, Any], full: dict[str, Any]) -> None:
    tail = len(full["losses"]) - _micro_steps_before_checkpoint()
    assert len(resumed["losses"]) == tail  # resumed mid-epoch, at the next batch
    assert_close(torch.tensor(resumed["losses"]), torch.tensor(full["losses"][-tail:]))
    assert_close(torch.tensor(resumed["lrs"]), torch.tensor(full["lrs"][SAVE_AT:]))
    _assert_weights(resumed["state_dict"], full["state_dict"], **FP32)


def test_uninterrupted_fsdp_and_ddp_agree_with_one_process(grid: dict[str, dict[str, Any]]) -> None:
    assert (grid["fsdp_full"]["strategy"], grid["ddp_full"]["strategy"]) == ("fsdp", "ddp")
    for name in ("fsdp_full", "ddp_full"):
        assert_close(torch.tensor(grid[name]["losses"]), torch.tensor(grid["single_full"]["losses"]))
        _assert_weights(grid[name]["state_dict"], grid["single_full"]["state_dict"], **FP32)


@pytest.mark.ddp
@pytest.mark.resume
@pytest.mark.parametrize("resumed", sorted(PAIRS))
def test_checkpoint_resumes_across_fsdp_and_ddp(grid: dict[str, dict[str, Any]], resumed: str) -> None:
    _continues(grid[resumed], grid[PAIRS[resumed]])


@pytest.mark.deepspeed
@pytest.mark.resume
@run_if(deepspeed=True, why="ZeRO-3 pairs skipped")
@pytest.mark.parametrize("resumed", sorted(ZERO3_PAIRS))
def test_checkpoint_resumes_across_fsdp_and_zero3(grid: dict[str, dict[str, Any]], resumed: str) -> None:
    _continues(grid[resumed], grid[ZERO3_PAIRS[resumed]])


@pytest.mark.deepspeed
@run_if(deepspeed=True, why="ZeRO-3 runs skipped")
def test_zero3_after_fsdp_in_the_same_launch_is_unaffected(grid: dict[str, dict[str, Any]]) -> None:
    assert grid["zero3_full"]["strategy"] == "zero3"
    assert_close(torch.tensor(grid["zero3_full"]["losses"]), torch.tensor(grid["single_full"]["losses"]))
    _assert_weights(grid["zero3_full"]["state_dict"], grid["single_full"]["state_dict"], **FP32)


def test_fsdp_checkpoint_is_the_neutral_format(shared_launch_out: Path) -> None:
    import json

    from safetensors.torch import load_file

    from accelerate_core.checkpoint import layout

    fsdp, ddp = shared_launch_out / "grid" / "ckpt_fsdp", shared_launch_out / "grid" / "ckpt_ddp"
    manifest = json.loads((fsdp / "manifest.json").read_text())
    assert manifest["writer"]["strategy"] == "fsdp" and manifest["writer"]["world_size"] == 2
    assert {p.name for p in fsdp.iterdir()} == {p.name for p in ddp.iterdir()}  # the same files
    # Saved at the same step of the same run: the same optimizer document, keyed by name, and
    # full-shape fp32 state (not this rank's shard) that agrees with DDP's.
    documents = [json.loads((d / layout.optimizer_json_file(0)).read_text()) for d in (fsdp, ddp)]
    assert documents[0] == documents[1]
    tensors = [load_file(str(d / layout.optimizer_tensors_file(0))) for d in (fsdp, ddp)]
    assert tensors[0].keys() == tensors[1].keys()
    for key, value in tensors[0].items():
        assert value.shape == tensors[1][key].shape and value.dtype == tensors[1][key].dtype, key
        assert_close(value, tensors[1][key], **FP32)
