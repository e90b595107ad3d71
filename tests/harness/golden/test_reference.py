"""The plain-PyTorch reference: independent of the core, deterministic, and fp16 overflow handling
that skips exactly the injected step."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

from harness.golden.reference import train_reference
from harness.tasks import get_task
from harness.tasks.base import DictDataset
from harness.tasks.regression import RegressionTask
from tests.distributed_helpers import REPO_ROOT

# Touches numerics or fp16 detection: nox's older-CPU pass runs it again (marker `numerics`).
pytestmark = pytest.mark.numerics


def test_reference_imports_nothing_from_the_core() -> None:
    code = (
        "import sys, harness.golden.reference, harness.golden.golden_store, harness.tasks\n"
        "bad = [m for m in sys.modules if m.startswith(('accelerate_core', 'deepspeed'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True, timeout=60)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_reference_is_deterministic_and_leaves_global_state(precision: str) -> None:
    task = get_task("classifier")
    threads, rng = torch.get_num_threads(), torch.random.get_rng_state()
    first, second = train_reference(task, precision), train_reference(task, precision)
    assert torch.get_num_threads() == threads and torch.equal(rng, torch.random.get_rng_state())
    assert first.losses == second.losses
    assert all(torch.equal(first.state_dict[k], second.state_dict[k]) for k in first.state_dict)


def test_record_shapes() -> None:
    task = get_task("classifier")
    record = train_reference(task, "fp32")
    assert len(record.losses) == task.micro_steps_per_epoch * task.epochs
    assert len(record.lrs) == task.steps and len(record.lrs[0]) == 3
    assert record.eval_outputs["logits"].shape == (task.eval_size, 4)
    assert torch.equal(record.eval_outputs["labels"], task.eval_dataset().tensors["labels"])
    assert record.skipped_steps == [] and record.loss_scales == []
    assert record.state_dict.keys() == task.build_model().state_dict().keys()


@pytest.mark.parametrize("name", ["regression", "classifier", "lm"])
def test_fp16_skips_exactly_the_injected_step(name: str) -> None:
    task = get_task(name)
    record = train_reference(task, "fp16")
    step = task.inject_overflow_step
    assert step is not None and record.skipped_steps == [step]
    assert record.loss_scales[step] == record.loss_scales[step - 1] / 2 if step else True
    assert len(record.loss_scales) == task.steps
    # The scheduler does not advance on a skipped step: the next step runs at the same lr.
    assert record.lrs[step + 1] == record.lrs[step]
    # Without the injection (bf16 has no loss scaling) nothing is skipped.
    assert train_reference(task, "bf16").skipped_steps == []


@dataclass(frozen=True, kw_only=True)
class _Prefix(RegressionTask):
    """regression trained on the first `train_size` samples of its full training set."""

    def train_dataset(self) -> DictDataset:
        full = RegressionTask().train_dataset()
        return DictDataset({k: v[: self.train_size] for k, v in full.tensors.items()})


def test_skipped_step_leaves_the_weights_alone() -> None:
    """Independent check of the skip: weights after a run whose last step k is skipped equal
    those of the same run stopped before step k."""
    k = RegressionTask().inject_overflow_step
    assert k is not None
    before = train_reference(_Prefix(train_size=k * 8), "fp16")
    through = train_reference(_Prefix(train_size=(k + 1) * 8), "fp16")
    assert through.skipped_steps == [k] and before.skipped_steps == []
    assert through.losses[:k] == before.losses
    assert all(torch.equal(before.state_dict[n], through.state_dict[n]) for n in before.state_dict)


def test_unknown_precision() -> None:
    with pytest.raises(ValueError, match="Valid"):
        train_reference(get_task("regression"), "fp8")
