"""The golden checkpoint: the plain-PyTorch reference's state after k steps in the neutral format
(docs/checkpoint-format.md), written without the core (no launch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from harness.golden.reference import train_reference
from harness.golden.reference_checkpoint import write_golden_checkpoint
from harness.plan.resume_cells import ResumePoint
from harness.tasks import get_task
from tests.harness.runner_helpers import REPO_ROOT


def test_golden_checkpoint_holds_the_references_state_after_k_steps(tmp_path: Path) -> None:
    task, step = get_task("classifier"), 5
    record = write_golden_checkpoint(task, "fp32", step, tmp_path / "ckpt")
    point = ResumePoint.of(task, step)
    full = train_reference(task, "fp32")  # the uninterrupted reference, same process and kernels
    # Stopping at k changes nothing before k: the same losses and lrs, bit for bit.
    assert record.losses == full.losses[:point.micro_steps]
    assert record.lrs == full.lrs[:step]
    files = {p.name for p in (tmp_path / "ckpt").iterdir()}
    manifest = json.loads((tmp_path / "ckpt" / "manifest.json").read_text())
    assert files == set(manifest["files"]) | {"manifest.json"}
    for name, entry in manifest["files"].items():
        assert (tmp_path / "ckpt" / name).stat().st_size == entry["bytes"]
    assert manifest["counts"] == {"models": 1, "optimizers": 1, "schedulers": 1, "dataloaders": 2, "ranks": 1}
    # The weights load into a plain module; they are the reference's after k steps, not its start.
    model = task.build_model()
    weights = load_file(tmp_path / "ckpt" / "model_0.safetensors")
    model.load_state_dict(weights)
    assert not torch.equal(weights["body.weight"], task.build_model().state_dict()["body.weight"])
    assert torch.equal(weights["embed.weight"], task.build_model().state_dict()["embed.weight"])  # frozen
    # Optimizer state by parameter name: AdamW moments for every trainable parameter, none for
    # the frozen one; param groups by names, lr as the scheduler left it after k steps.
    optimizer = json.loads((tmp_path / "ckpt" / "optimizer_0.json").read_text())
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert sorted(optimizer["state"]) == sorted(trainable)
    moments = load_file(tmp_path / "ckpt" / "optimizer_0.safetensors")
    assert {f"{n}/{k}" for n in trainable for k in ("exp_avg", "exp_avg_sq", "step")} == set(moments)
    assert [g["params"] for g in optimizer["param_groups"]] == [
        ["body.weight", "body.bias"], ["head.linear.weight", "head.linear.bias"], ["head.temperature"]]
    assert [g["lr"] for g in optimizer["param_groups"]] == full.lrs[step]
    progress = json.loads((tmp_path / "ckpt" / "progress.json").read_text())["dataloaders"][0]
    assert (progress["epoch"], progress["batches_consumed"]) == (point.epoch, point.batch)
    scheduler = json.loads((tmp_path / "ckpt" / "scheduler_0.json").read_text())
    assert scheduler["state"]["last_epoch"] == step


def test_the_writer_imports_nothing_of_the_core() -> None:
    code = ("import sys, harness.golden.reference_checkpoint; "
            "sys.exit(any(m.split('.')[0] == 'accelerate_core' for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=False).returncode == 0
