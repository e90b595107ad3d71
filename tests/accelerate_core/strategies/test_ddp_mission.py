"""The user loop on 2 real CPU ranks (DDP over gloo) against plain single-process PyTorch.

The reference trains one process on the same global batches (plain_reference.py, which imports
nothing from the core). Tolerances are those of the issue: fp32 to torch's fp32 defaults
(rtol 1.3e-6, atol 1e-5), fp16 within 1e-2, bf16 within 5e-2.

The three runs (fp32, fp16, bf16) are this module's part of the session's shared 2-rank launch
(shared_launch.py): one after another in one process group, each with a fresh Accelerator freed
afterwards, before any DeepSpeed part. If the launch fails, every test here fails with its output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.accelerate_core.conftest import Mission, mission_records, mission_scenario
from tests.accelerate_core.scripts.plain_reference import train_reference
from tests.accelerate_core.scripts.task import Classifier, TaskConfig
from tests.accelerate_core.shared_launch import LaunchPart

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

OVERFLOW_STEP = 3


MISSIONS = (
    Mission("fp32"),
    Mission("fp16", ("--mixed-precision", "fp16", "--inject-overflow-step", str(OVERFLOW_STEP))),
    Mission("bf16", ("--mixed-precision", "bf16")),
)


# DDP only: it runs before the DeepSpeed parts of the launch (order -1), as close as a shared
# launch gets to the fresh processes these runs had.
SHARED_LAUNCH = LaunchPart(scenarios=lambda out, fixtures: [mission_scenario(out, m) for m in MISSIONS],
                           timeout=240, order=-1)


@pytest.fixture(scope="module")
def runs(shared_launch_out: Path) -> dict[str, dict[str, Any]]:
    return mission_records(shared_launch_out, MISSIONS)


@pytest.fixture(scope="module")
def fp32_run(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return runs["fp32"]


@pytest.fixture(scope="module")
def fp16_run(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return runs["fp16"]


@pytest.fixture(scope="module")
def bf16_run(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return runs["bf16"]


def _assert_weights(path: Path, reference: dict[str, torch.Tensor], rtol: float, atol: float) -> None:
    state = torch.load(path, weights_only=True)
    assert state.keys() == reference.keys()
    for key, value in state.items():
        assert value.device.type == "cpu"
        try:
            torch.testing.assert_close(value, reference[key], rtol=rtol, atol=atol)
        except AssertionError as error:
            raise AssertionError(f"{key}: {error}") from None


def test_fp32_weights_match_plain_pytorch(fp32_run: dict[str, Any]) -> None:
    reference = train_reference(TaskConfig(world_size=2))
    assert fp32_run["num_processes"] == 2
    _assert_weights(fp32_run["model_path"], reference["state_dict"], rtol=1.3e-6, atol=1e-5)
    torch.testing.assert_close(
        torch.tensor(fp32_run["losses"]), torch.tensor(reference["losses"]), rtol=1.3e-6, atol=1e-5
    )
    assert fp32_run["lrs"] == pytest.approx(reference["lrs"], rel=1e-12)
    assert not any(fp32_run["skipped"])  # is_overflow is False on every fp32 step


def test_gathered_eval_outputs_complete_and_in_order(fp32_run: dict[str, Any]) -> None:
    reference = train_reference(TaskConfig(world_size=2))
    # 37 eval samples, batch 4 on 2 ranks: 5 global batches of 8, the last padded with 3 repeats.
    assert fp32_run["metric_predictions"].shape == (37, 4)
    torch.testing.assert_close(fp32_run["metric_labels"], reference["metric_labels"], rtol=0, atol=0)
    torch.testing.assert_close(
        fp32_run["metric_predictions"], reference["metric_predictions"], rtol=1.3e-6, atol=1e-5
    )
    # Plain gather keeps the padding, at the end only: the wrap-around repeats samples 0..2.
    assert fp32_run["predictions"].shape == (40, 4)
    torch.testing.assert_close(fp32_run["labels"][37:], reference["metric_labels"][:3], rtol=0, atol=0)


def test_saved_state_dict_loads_into_a_fresh_model(fp32_run: dict[str, Any]) -> None:
    fresh = Classifier()
    fresh.load_state_dict(torch.load(fp32_run["model_path"], weights_only=True), strict=True)
    assert fp32_run["unwrapped_keys"] == sorted(fresh.state_dict())
    # The loaded model reproduces the gathered evaluation outputs of the trained one.
    from tests.accelerate_core.scripts.task import EVAL_DATA_SEED, SyntheticClassification

    data = SyntheticClassification(37, EVAL_DATA_SEED)
    with torch.no_grad():
        logits = fresh(data.x).logits
    torch.testing.assert_close(logits, fp32_run["metric_predictions"], rtol=1.3e-6, atol=1e-5)


@pytest.mark.fp16
def test_fp16_reports_the_injected_overflow(fp16_run: dict[str, Any]) -> None:
    reference = train_reference(
        TaskConfig(world_size=2, mixed_precision="fp16", inject_overflow_step=OVERFLOW_STEP)
    )
    skipped = fp16_run["skipped"]
    assert [i for i, s in enumerate(skipped) if s] == [OVERFLOW_STEP]
    assert skipped == reference["skipped"]
    params = fp16_run["params"]
    # The skipped step left every weight exactly as it was; the steps around it moved them.
    assert torch.equal(params[OVERFLOW_STEP], params[OVERFLOW_STEP - 1])
    assert not torch.equal(params[OVERFLOW_STEP + 1], params[OVERFLOW_STEP])
    # The scheduler did not advance: the lr after the skipped step is the lr before it.
    lrs = fp16_run["lrs"]
    assert lrs[OVERFLOW_STEP] == lrs[OVERFLOW_STEP - 1]
    assert lrs[OVERFLOW_STEP + 1] < lrs[OVERFLOW_STEP]
    assert lrs == pytest.approx(reference["lrs"], rel=1e-12)
    # GradScaler halved its scale at the overflow and only there.
    scales = fp16_run["loss_scales"]
    assert scales[OVERFLOW_STEP] == scales[OVERFLOW_STEP - 1] / 2
    assert scales == reference["loss_scales"]
    _assert_weights(fp16_run["model_path"], reference["state_dict"], rtol=0, atol=1e-2)
    torch.testing.assert_close(
        fp16_run["metric_predictions"], reference["metric_predictions"], rtol=0, atol=1e-2
    )


@pytest.mark.bf16
def test_bf16_within_tolerance(bf16_run: dict[str, Any]) -> None:
    reference = train_reference(TaskConfig(world_size=2, mixed_precision="bf16"))
    assert not any(bf16_run["skipped"])
    _assert_weights(bf16_run["model_path"], reference["state_dict"], rtol=0, atol=5e-2)
    torch.testing.assert_close(
        bf16_run["metric_predictions"], reference["metric_predictions"], rtol=0, atol=5e-2
    )
    assert bf16_run["metric_predictions"].shape == (37, 4)
