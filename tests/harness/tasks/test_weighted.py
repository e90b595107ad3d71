"""The `weighted` task: its training DataLoader takes a WeightedRandomSampler, its golden's batches are
the ones that sampler draws (checked here against a plain DataLoader, not through the reference's
loop), an epoch is as long as the sampler (not the dataset), and the golden checkpoint refuses it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, WeightedRandomSampler

from harness.errors import HarnessError
from harness.golden.reference import train_reference
from harness.golden.reference_checkpoint import write_golden_checkpoint
from harness.tasks import WeightedSamplingTask, get_task, training_loader_options
from harness.tasks.base import DictDataset


def test_the_loader_takes_a_seeded_weighted_sampler_drawing_fewer_samples_than_the_dataset_holds() -> None:
    task = get_task("weighted")
    assert isinstance(task, WeightedSamplingTask) and task.epochs >= 2
    options = training_loader_options(task)
    assert set(options) == {"sampler"}
    sampler = options["sampler"]
    assert isinstance(sampler, WeightedRandomSampler) and sampler.replacement
    assert len(sampler) == task.samples_per_epoch < task.train_size
    assert sampler.generator is not None and sampler.generator.initial_seed() == task.sampler_seed
    # Two fresh loaders (the reference's, a rank's) draw the same first pass.
    assert list(sampler) == list(training_loader_options(task)["sampler"])


def test_an_epoch_is_the_samplers_length_in_global_batches() -> None:
    task = get_task("weighted")
    assert task.micro_steps_per_epoch == task.samples_per_epoch // task.global_batch_size == 5
    assert task.steps == task.micro_steps_per_epoch * task.epochs
    assert len(train_reference(task, "fp32").losses) == task.micro_steps_per_epoch * task.epochs


def test_each_epochs_first_loss_is_the_first_batch_the_plain_sampler_draws_in_that_epoch() -> None:
    """Independently of the reference's loop: the step-0 loss is the untrained model's loss on the
    first batch of a plain DataLoader with the task's sampler, and the three epochs start on three
    different draws."""
    task = get_task("weighted")
    record = train_reference(task, "fp32")
    dataset = task.train_dataset()
    weights = 1.0 + (torch.arange(task.train_size) % task.weight_period).double()
    plain = DataLoader(DictDataset(dataset.tensors), batch_size=task.global_batch_size,
                       sampler=WeightedRandomSampler(weights, task.samples_per_epoch, replacement=True,
                                                     generator=torch.Generator().manual_seed(task.sampler_seed)))
    firsts = [next(iter(plain)) for _ in range(task.epochs)]
    with torch.no_grad():
        expected = float(task.build_model()(**firsts[0]).loss)
    assert record.losses[0] == pytest.approx(expected, rel=1e-6, abs=0)
    assert len({tuple(batch["x"][:, 0].tolist()) for batch in firsts}) == task.epochs


def test_a_sampler_length_that_leaves_a_short_batch_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="samples_per_epoch 36 is not a positive multiple") as raised:
        dataclasses.replace(get_task("weighted"), samples_per_epoch=36)
    assert "Fix:" in str(raised.value)


def test_the_golden_checkpoint_refuses_a_task_with_a_custom_sampler(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="drawn by a custom sampler") as raised:
        write_golden_checkpoint(get_task("weighted"), "fp32", 2, tmp_path / "ckpt")
    assert "leave this task out of [[resume.grid]]" in str(raised.value)
    assert not (tmp_path / "ckpt").exists()
