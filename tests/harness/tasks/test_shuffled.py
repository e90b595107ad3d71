"""The `shuffle` task: its golden's batches are the ones torch's own DataLoader draws, epoch after
epoch, and the golden checkpoint of a resume cell refuses a shuffled task rather than writing an
order it does not know."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from harness.errors import HarnessError
from harness.golden.reference import train_reference
from harness.golden.reference_checkpoint import write_golden_checkpoint
from harness.tasks import ShuffledTask, get_task, training_loader_options
from harness.tasks.base import DictDataset


def test_a_shuffled_task_builds_a_seeded_shuffling_loader_and_the_others_keep_order() -> None:
    task = get_task("shuffle")
    assert isinstance(task, ShuffledTask) and task.epochs >= 2
    options = training_loader_options(task)
    assert options["shuffle"] is True
    assert options["generator"].initial_seed() == task.shuffle_seed
    assert training_loader_options(get_task("sgd_accum")) == {"shuffle": False}


def test_each_epochs_first_loss_is_the_plain_dataloaders_first_batch_of_that_epoch() -> None:
    """Independently of the reference's loop: the step-0 loss is the untrained model's loss on the
    first batch a plain shuffling DataLoader gives, and the first batches of the three epochs are
    three different ones (the losses at those steps are computed on them)."""
    task = get_task("shuffle")
    record = train_reference(task, "fp32")
    dataset = task.train_dataset()
    plain = DataLoader(DictDataset(dataset.tensors), batch_size=task.global_batch_size, shuffle=True,
                       generator=torch.Generator().manual_seed(task.shuffle_seed))
    firsts = [next(iter(plain)) for _ in range(task.epochs)]
    model = task.build_model()
    with torch.no_grad():
        expected = float(model(**firsts[0]).loss)
    assert record.losses[0] == pytest.approx(expected, rel=1e-6, abs=0)
    in_order = next(iter(DataLoader(DictDataset(dataset.tensors), batch_size=task.global_batch_size)))
    assert not torch.equal(firsts[0]["x"], in_order["x"])
    assert len({tuple(batch["x"][:, 0].tolist()) for batch in firsts}) == task.epochs


def test_the_golden_checkpoint_refuses_a_shuffled_task(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="its training data is shuffled") as raised:
        write_golden_checkpoint(get_task("shuffle"), "fp32", 2, tmp_path / "ckpt")
    assert "leave this task out of [[resume.grid]]" in str(raised.value)
    assert not (tmp_path / "ckpt").exists()
