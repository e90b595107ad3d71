"""The shared MISSION script (scripts/mission_loop.py, the core's classification task: shuffled
data, a padded last eval batch, a short last accumulation) with DeepSpeedPlugin on 2 CPU ranks,
against the core's plain-PyTorch reference (scripts/plain_reference.py, no accelerate_core).

This is the shape of the outside check: one stage per precision, so every stage and every
precision is covered by a second task besides test_deepspeed_training.py's. Tolerances are the
issue's: fp32 torch's defaults, bf16 5e-2, fp16 1e-2. fp16 runs through the opt-in emulation
given as the launcher would (ACCELERATE_CORE_CPU_FP16_EMULATION, set for that run only), so the
script is unchanged.

The three cases are this module's part of the session's shared 2-rank launch (shared_launch.py):
one after another in one process group, each with a fresh Accelerator and engine freed
afterwards (fp16 last: it swaps DeepSpeed's accelerator for the emulating one until its
teardown). If the launch fails, every case fails with its output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from tests.accelerate_core.conftest import Mission, mission_records, mission_scenario
from tests.accelerate_core.scripts.plain_reference import train_reference
from tests.accelerate_core.scripts.task import TaskConfig
from tests.accelerate_core.shared_launch import LaunchPart
from tests.run_if import run_if

pytestmark = [
    pytest.mark.deepspeed,
    pytest.mark.slow,
    run_if(deepspeed=True, why="DeepSpeed tests skipped"),
]

OVERFLOW_STEP = 3
CASES = {  # (zero stage, precision) -> (rtol, atol)
    (3, "no"): (1.3e-6, 1e-5),
    (1, "bf16"): (5e-2, 5e-2),
    (2, "fp16"): (0.0, 1e-2),
}


def case_id(stage: int, precision: str) -> str:
    return f"zero{stage}-{precision}"


def mission(stage: int, precision: str) -> Mission:
    args = ("--zero-stage", str(stage), "--mixed-precision", precision)
    if precision != "fp16":
        return Mission(case_id(stage, precision), args)
    return Mission(case_id(stage, precision), (*args, "--inject-overflow-step", str(OVERFLOW_STEP)),
                   env={"ACCELERATE_CORE_CPU_FP16_EMULATION": "1"})


MISSIONS = [mission(s, p) for s, p in CASES]  # fp16 last, as CASES has it
SHARED_LAUNCH = LaunchPart(scenarios=lambda out, fixtures: [mission_scenario(out, m) for m in MISSIONS],
                           needs_deepspeed=True, timeout=300)


@pytest.fixture(scope="module")
def records(shared_launch_out: Path) -> dict[str, dict[str, Any]]:
    return mission_records(shared_launch_out, MISSIONS)


def load(records: dict[str, dict[str, Any]], stage: int, precision: str) -> dict[str, Any]:
    record = records[case_id(stage, precision)]
    record["state_dict"] = torch.load(record["model_path"], weights_only=True)
    return record


@pytest.mark.parametrize(("stage", "precision"), list(CASES), ids=[case_id(s, p) for s, p in CASES])
def test_mission_loop_with_deepspeed_matches_plain_pytorch(
    records: dict[str, dict[str, Any]], stage: int, precision: str
) -> None:
    rtol, atol = CASES[(stage, precision)]
    record = load(records, stage, precision)
    inject = OVERFLOW_STEP if precision == "fp16" else None
    ref = train_reference(TaskConfig(world_size=2, mixed_precision=precision, inject_overflow_step=inject))

    assert record["num_processes"] == 2
    assert record["skipped"] == ref["skipped"]  # is_overflow: only the injected step, if any
    if precision == "fp16":
        assert [i for i, s in enumerate(record["skipped"]) if s] == [OVERFLOW_STEP]
        # DeepSpeed's dynamic loss scale moves exactly like GradScaler's (config reconciled).
        assert record["loss_scales"] == ref["loss_scales"]
    assert record["lrs"] == pytest.approx(ref["lrs"], rel=1e-12)
    assert_close(torch.tensor(record["losses"]), torch.tensor(ref["losses"]), rtol=rtol, atol=atol)
    assert record["metric_predictions"].shape == ref["metric_predictions"].shape
    assert_close(record["metric_labels"], ref["metric_labels"], rtol=0, atol=0)
    assert_close(record["metric_predictions"], ref["metric_predictions"], rtol=rtol, atol=atol)
    assert list(record["state_dict"]) == list(ref["state_dict"])
    for key, value in ref["state_dict"].items():
        assert record["state_dict"][key].dtype == torch.float32
        assert_close(record["state_dict"][key], value.float(), rtol=rtol, atol=atol,
                     msg=lambda m, k=key: f"{k}: {m}")  # type: ignore[misc]
