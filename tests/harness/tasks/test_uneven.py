"""The `uneven` task: a training set that is not a whole number of global batches. Its golden
trains on the batches a plain DataLoader yields, the short last one of each epoch included, and
steps the optimizer on it as the user loop does; a task with `drop_last` leaves that batch out."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch.utils.data import DataLoader

from harness.golden.reference import train_reference
from harness.tasks import UnevenTask, get_task, training_loader_options
from harness.tasks.base import DictDataset


@dataclass(frozen=True, kw_only=True)
class _Dropping(UnevenTask):
    name: str = "uneven_dropping"
    train_size: int = 60
    drop_last: bool = True


def test_uneven_drop_leaves_the_short_batch_out_of_its_golden() -> None:
    """7 batches of 8 per epoch, steps after micro-steps 2, 5 and 6; every loss the golden records
    is a full batch's, the first epoch's last one that of the plain DataLoader's 7th batch."""
    task = get_task("uneven_drop")
    assert isinstance(task, UnevenTask) and task.drop_last
    assert task.train_size == get_task("uneven").train_size
    assert task.micro_steps_per_epoch == 7
    assert [s for s in range(task.micro_steps_per_epoch) if task.is_accumulation_boundary(s)] == [2, 5, 6]
    record = train_reference(task, "fp32")
    assert len(record.losses) == 7 * task.epochs
    # The same data and model as `uneven`: the first 7 micro-steps are the same computation (the
    # weights differ only after micro-step 6's step); `uneven`'s 8th loss is its short batch's.
    kept = train_reference(get_task("uneven"), "fp32")
    assert record.losses[:7] == kept.losses[:7] and record.losses[7] != kept.losses[7]
    plain = list(DataLoader(DictDataset(task.train_dataset().tensors), batch_size=8, drop_last=True))
    assert len(plain) == 7 and all(len(batch["x"]) == 8 for batch in plain)


def test_the_steps_count_the_short_batch_unless_it_is_dropped() -> None:
    task = get_task("uneven")
    assert isinstance(task, UnevenTask) and task.train_size % task.global_batch_size
    plain = DataLoader(DictDataset(task.train_dataset().tensors), batch_size=task.global_batch_size)
    assert task.micro_steps_per_epoch == len(plain) == 8
    assert [len(batch["x"]) for batch in plain][-1] == task.train_size % task.global_batch_size == 4
    # Accumulation over 3: optimizer steps after micro-steps 2, 5 and 7 (the short batch's window).
    assert [s for s in range(task.micro_steps_per_epoch) if task.is_accumulation_boundary(s)] == [2, 5, 7]
    assert task.steps == 3 * task.epochs
    dropping = _Dropping()
    dropped = DataLoader(range(dropping.train_size), batch_size=dropping.global_batch_size, drop_last=True)
    assert dropping.micro_steps_per_epoch == len(dropped) == 7


def test_the_loader_options_carry_drop_last_for_an_uneven_task_only() -> None:
    assert training_loader_options(get_task("uneven")) == {"shuffle": False, "drop_last": False}
    assert training_loader_options(_Dropping()) == {"shuffle": False, "drop_last": True}
    assert "drop_last" not in training_loader_options(get_task("sgd_accum"))


def test_a_training_set_that_divides_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="train_size 64 is a multiple of global_batch_size 8") as raised:
        _Dropping(train_size=64)
    assert "Fix:" in str(raised.value)


def test_the_golden_trains_on_the_short_batch_as_plain_pytorch_gives_it() -> None:
    """Independently of the reference's loop: the loss it records at micro-step 7 is the loss a
    model at that point computes on the plain DataLoader's 4-sample batch, not on a padded one."""
    task = get_task("uneven")
    record = train_reference(task, "fp32")
    assert len(record.losses) == task.micro_steps_per_epoch * task.epochs == 16
    batches = list(DataLoader(DictDataset(task.train_dataset().tensors), batch_size=task.global_batch_size))
    model = task.build_model()
    optimizer = task.build_optimizer(model)
    for step, batch in enumerate(batches):  # the first epoch, as the user loop runs it
        output = model(**batch)
        if step == 7:
            assert record.losses[7] == pytest.approx(output.loss.item(), rel=1e-6, abs=0)
            with torch.no_grad():  # what a padded batch (filled from the start) would have given
                padded = {key: torch.cat([value, batches[0][key][:4]]) for key, value in batch.items()}
                assert float(model(**padded).loss) != pytest.approx(record.losses[7], rel=1e-3)
        (output.loss / task.gradient_accumulation_steps).backward()
        if task.is_accumulation_boundary(step):
            optimizer.step()
            optimizer.zero_grad()
