"""Sharding rules, checked in one process by building every rank's sampler side by side."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accelerate_core import UnsupportedObjectError
from accelerate_core.data import DataState, PreparedDataLoader, ShardedBatchSampler, global_order


def _samplers(
    n: int, batch: int, world: int, shuffle: bool, drop_last: bool = False
) -> list[ShardedBatchSampler]:
    return [
        ShardedBatchSampler(lambda e: global_order(n, shuffle, 5, e), n, batch, r, world, drop_last)
        for r in range(world)
    ]


@pytest.mark.parametrize(("n", "batch", "world"), [(37, 4, 2), (64, 4, 2), (10, 3, 3), (5, 2, 4), (7, 1, 1)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_n_ranks_of_b_equal_one_process_of_n_times_b(n: int, batch: int, world: int, shuffle: bool) -> None:
    ranks = _samplers(n, batch, world, shuffle)
    single = _samplers(n, batch * world, 1, shuffle)[0]
    per_rank = [list(s) for s in ranks]
    assert all(len(s) == len(single) for s in ranks)
    for step, global_batch in enumerate(single):
        # rank r's batch at this step is block r of the one-process global batch
        assert [rank_batches[step] for rank_batches in per_rank] == [
            global_batch[r * batch : (r + 1) * batch] for r in range(world)
        ]


def test_padding_wraps_to_the_start_and_sits_at_the_end() -> None:
    flat = [
        i
        for step in zip(*(list(s) for s in _samplers(37, 4, 2, False)), strict=True)
        for b in step
        for i in b
    ]
    assert flat == [*range(37), 0, 1, 2]


def test_drop_last_drops_the_short_global_batch() -> None:
    ranks = _samplers(37, 4, 2, False, drop_last=True)
    assert len(ranks[0]) == 4 and ranks[0].remainder == 0
    assert [i for b in ranks[1] for i in b] == [4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31]


def test_epochs_reshuffle_identically_on_every_rank() -> None:
    first = global_order(20, True, 3, 0)
    assert first == torch.randperm(20, generator=torch.Generator().manual_seed(3)).tolist()
    assert global_order(20, True, 3, 1) != first
    assert global_order(20, True, 3, 0) == first


def test_prepared_loader_set_epoch_and_auto_advance() -> None:
    data = TensorDataset(torch.arange(12))
    loader = PreparedDataLoader(
        DataLoader(data, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(9)),
        0,
        1,
        torch.device("cpu"),
        DataState(),
    )
    epoch0 = [int(x) for (b,) in loader for x in b]
    epoch1 = [int(x) for (b,) in loader for x in b]
    assert epoch0 == torch.randperm(12, generator=torch.Generator().manual_seed(9)).tolist()
    assert epoch1 == torch.randperm(12, generator=torch.Generator().manual_seed(10)).tolist()
    loader.set_epoch(0)
    assert [int(x) for (b,) in loader for x in b] == epoch0
    # Resuming: skipping batches leaves the rest of that epoch's order unchanged.
    loader.set_epoch(1)
    assert [int(x) for (b,) in loader.iterate(skip=2) for x in b] == epoch1[6:]


def test_unshardable_loaders_are_refused() -> None:
    data = TensorDataset(torch.arange(8))
    batch_sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(data), 2, False)
    with pytest.raises(UnsupportedObjectError, match="batch_sampler"):
        PreparedDataLoader(
            DataLoader(data, batch_sampler=batch_sampler), 0, 2, torch.device("cpu"), DataState()
        )
    sampler = torch.utils.data.RandomSampler(data, replacement=True)
    with pytest.raises(UnsupportedObjectError, match="replacement"):
        PreparedDataLoader(
            DataLoader(data, batch_size=2, sampler=sampler), 0, 2, torch.device("cpu"), DataState()
        )
