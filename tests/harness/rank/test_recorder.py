"""The rank's recorder (harness.rank.recorder) with a real Accelerator on one CPU process: what it
records per optimizer step, which forwards are training micro-steps for the random-draw
evidence, what ran (the core's what_ran()), and that it leaves no hook or wrapper behind."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from accelerate_core import Accelerator
from harness.implementations import adapter_for
from harness.rank.recorder import RankRecorder
from harness.rank.resume_point import RunSpan
from harness.tasks import get_task


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.Linear(4, 1))


def test_micro_steps_run_from_a_training_forward_to_the_optimizer_step() -> None:
    recorder = RankRecorder(get_task("regression"), RunSpan(), adapter_for("core"))
    accelerator = Accelerator(cpu=True, observers=[recorder])
    all_reduce = dist.all_reduce
    plain = _model()
    model, optimizer = accelerator.prepare(plain, torch.optim.SGD(plain.parameters(), lr=0.1))
    assert dist.all_reduce is not all_reduce  # counted from prepare on
    x = torch.ones(2, 3)
    model.train()
    for micro_step in range(4):
        accelerator.backward(model(x).sum())  # dropout draws a mask in every training forward
        if micro_step % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()
            torch.rand(1)  # e.g. the next epoch's loader iterator seeding itself: no micro-step's
    model.eval()
    with torch.no_grad():
        model(x)  # evaluation: no micro-step
    evidence = recorder.evidence(accelerator, model, plain)
    assert evidence["random_draws"] == {"steps": 4, "drawing": 4, "generators": "torch CPU generator"}
    assert recorder.lrs == [[0.1], [0.1]] and recorder.skipped_steps == [] and recorder.loss_scales == []
    assert evidence["strategy"] == "single" and evidence["world_size"] == 1 and evidence["device"] == "cpu"
    assert evidence["collectives"] == {} and "gradients_agreed" not in evidence  # one process
    # Nothing is left installed once the evidence is read (evaluation is not training).
    assert dist.all_reduce is all_reduce and not model._forward_pre_hooks


def test_draws_nothing_without_dropout_and_the_evidence_keeps_its_keys() -> None:
    recorder = RankRecorder(get_task("regression"), RunSpan(), adapter_for("core"))
    accelerator = Accelerator(cpu=True, observers=[recorder])
    plain = nn.Linear(3, 1)
    model, optimizer = accelerator.prepare(plain, torch.optim.SGD(plain.parameters(), lr=0.1))
    accelerator.backward(model(torch.ones(2, 3)).sum())
    optimizer.step()
    evidence = recorder.evidence(accelerator, model, plain)
    assert evidence["random_draws"] == {"steps": 1, "drawing": 0, "generators": ""}
    assert list(evidence)[:7] == ["strategy_class", "strategy", "model_class", "world_size", "device",
                                  "emulated", "core_path"]  # what_ran's, then the recorder's own
    assert list(evidence)[-4:] == ["unwrap_model", "random_draws", "collectives", "collective_elements"]
    assert evidence["unwrap_model"] == {"is_the_prepared_module": True, "class": "Linear"}


def test_unwrap_model_handing_back_anything_but_the_prepared_module_is_recorded() -> None:
    """Read from what unwrap_model returned, by identity: a copy with the same class and weights is
    not the module the user trained (a wrapper is what a wrong unwrap usually returns)."""
    recorder = RankRecorder(get_task("regression"), RunSpan(), adapter_for("core"))
    accelerator = Accelerator(cpu=True, observers=[recorder])
    plain = nn.Linear(3, 1)
    model = accelerator.prepare(plain)
    accelerator.unwrap_model = lambda prepared: copy.deepcopy(prepared)  # type: ignore[method-assign]
    evidence = recorder.evidence(accelerator, model, plain)
    assert evidence["unwrap_model"] == {"is_the_prepared_module": False, "class": "Linear"}


@pytest.mark.fp16
def test_skipped_steps_are_numbered_from_the_spans_first_step() -> None:
    span = RunSpan(step=5, loads_from=Path("checkpoint"))  # a destination: its first step is the run's 6th
    recorder = RankRecorder(get_task("regression"), span, adapter_for("core"))
    accelerator = Accelerator(fp16=True, cpu=True, observers=[recorder])
    plain = nn.Linear(3, 1)
    model, optimizer = accelerator.prepare(plain, torch.optim.SGD(plain.parameters(), lr=0.1))
    for scale in (1.0, float("inf"), 1.0):
        accelerator.backward(model(torch.ones(2, 3)).float().mean() / 4 * scale)  # fp16 grads finite at 2**16
        optimizer.step()
        optimizer.zero_grad()
    recorder.close()
    assert recorder.skipped_steps == [6]
    assert len(recorder.loss_scales) == 3 and recorder.loss_scales[1] == recorder.loss_scales[0] / 2
