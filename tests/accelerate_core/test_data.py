"""Sharding rules, checked in one process by building every rank's sampler side by side."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

from accelerate_core import UnsupportedObjectError
from accelerate_core.data import DataState, PreparedDataLoader, ShardedBatchSampler


def _order(n: int, shuffle: bool, epoch: int) -> list[int]:
    """Any global order the ranks agree on: the sampler's job is only to split it."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(5 + epoch)).tolist() if shuffle \
        else list(range(n))


def _samplers(
    n: int, batch: int, world: int, shuffle: bool, drop_last: bool = False
) -> list[ShardedBatchSampler]:
    return [
        ShardedBatchSampler(lambda e: _order(n, shuffle, e), n, batch, r, world, drop_last)
        for r in range(world)
    ]


@pytest.mark.parametrize(("n", "batch", "world"), [(37, 4, 2), (64, 4, 2), (10, 3, 3), (5, 2, 4), (7, 1, 1)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_n_ranks_of_b_equal_one_process_of_n_times_b(n: int, batch: int, world: int, shuffle: bool) -> None:
    """Every global batch split in rank order; a short last one (one process keeps it short) is
    filled on several ranks from the start of the order, repeatedly if the data is smaller."""
    ranks = _samplers(n, batch, world, shuffle)
    single = _samplers(n, batch * world, 1, shuffle)[0]
    per_rank = [list(s) for s in ranks]
    assert all(len(s) == len(single) for s in ranks)
    order = _order(n, shuffle, 0)
    for step, global_batch in enumerate(single):
        size = batch * world
        padding = [order[i % n] for i in range(size - len(global_batch))] if world > 1 else []
        filled = global_batch + padding
        # rank r's batch at this step is block r of the (filled) one-process global batch
        assert [rank_batches[step] for rank_batches in per_rank] == [
            filled[r * batch : (r + 1) * batch] for r in range(world)
        ]


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_one_process_yields_the_plain_dataloaders_batches_short_last_batch_included(
        shuffle: bool, drop_last: bool) -> None:
    """The reference is a plain DataLoader over the same data: 10 samples in batches of 4 end with
    a batch of 2, or none with drop_last. A core that padded it on one process trained the last step
    of every epoch on two repeated samples, which plain PyTorch never sees."""
    data = TensorDataset(torch.arange(10))

    def make() -> DataLoader:
        generator = torch.Generator().manual_seed(3)
        return DataLoader(data, batch_size=4, shuffle=shuffle, generator=generator, drop_last=drop_last)

    plain = [[int(x) for x in b] for (b,) in make()]
    prepared = PreparedDataLoader(make(), 0, 1, torch.device("cpu"), DataState())
    assert [[int(x) for x in b] for (b,) in prepared] == plain  # type: ignore[union-attr]
    assert len(prepared) == len(plain) == (2 if drop_last else 3)
    assert [len(b) for b in plain][-1] == (4 if drop_last else 2)
    assert prepared.remainder == 0  # nothing padded: gather_for_metrics keeps every row


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


def _plain_passes(loader: DataLoader, passes: int) -> list[list[int]]:
    return [[int(x) for (b,) in loader for x in b] for _ in range(passes)]


@pytest.mark.parametrize("seeded", [True, False], ids=["generator", "global-seed"])
def test_one_process_sees_the_batches_of_the_plain_dataloader_pass_after_pass(seeded: bool) -> None:
    """The reference is plain PyTorch: the same DataLoader iterated without the core. Each pass
    draws a worker base seed and then the permutation from the loader's generator (or the global
    stream), and the core must draw the same, so epoch 2 and later match too (a core that seeded
    its own permutation with seed + epoch matched no pass at all)."""
    data = TensorDataset(torch.arange(12))

    def make() -> DataLoader:
        torch.manual_seed(4)
        generator = torch.Generator().manual_seed(9) if seeded else None
        return DataLoader(data, batch_size=3, shuffle=True, generator=generator)

    plain = _plain_passes(make(), 3)
    prepared = PreparedDataLoader(make(), 0, 1, torch.device("cpu"), DataState())
    assert _plain_passes(prepared, 3) == plain  # type: ignore[arg-type]
    assert len({tuple(p) for p in plain}) == 3  # three different orders: the check can fail


def test_set_epoch_labels_the_epoch_and_leaves_the_order_to_the_generator() -> None:
    """As with a plain DataLoader over a RandomSampler (which has no set_epoch): the epoch number
    is what save_state records; the order is the generator's next draw."""
    data = TensorDataset(torch.arange(12))
    plain = _plain_passes(DataLoader(data, batch_size=3, shuffle=True,
                                     generator=torch.Generator().manual_seed(9)), 2)
    loader = PreparedDataLoader(
        DataLoader(data, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(9)),
        0, 1, torch.device("cpu"), DataState())
    assert [int(x) for (b,) in loader for x in b] == plain[0] and loader.epoch == 1
    loader.set_epoch(0)
    assert [int(x) for (b,) in loader for x in b] == plain[1] and loader.epoch == 1
    assert loader.progress()["epoch"] == 1


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


def _twelve(seed: int) -> PreparedDataLoader:
    return PreparedDataLoader(
        DataLoader(TensorDataset(torch.arange(12)), batch_size=3, shuffle=True,
                   generator=torch.Generator().manual_seed(seed)),
        0, 1, torch.device("cpu"), DataState())


def test_a_pass_restored_mid_epoch_and_the_passes_after_it_are_the_uninterrupted_ones() -> None:
    """progress() mid-pass, restored into a loader whose generator is elsewhere: the rest of that
    pass, then the next passes, are those of the uninterrupted loader (its order and generator
    state travel in the entry; nothing is drawn for the resumed pass)."""
    uninterrupted = _twelve(9)
    passes = [[int(x) for (b,) in uninterrupted for x in b] for _ in range(3)]
    interrupted = _twelve(9)
    first = [int(x) for (b,) in interrupted for x in b]
    iterator = iter(interrupted)
    second_start = [int(x) for x in next(iterator)[0]]
    entry = interrupted.progress()
    assert first == passes[0] and second_start == passes[1][:3]
    assert entry["order"] == passes[1] and entry["epoch"] == 1 and entry["batches_consumed"] == 1

    resumed = _twelve(1234)  # another seed: only the checkpoint can put it back
    resumed.restore(entry, 0)
    rest = [int(x) for (b,) in resumed.iterate(skip=resumed.resume_skip) for x in b]
    after = [int(x) for (b,) in resumed for x in b]
    assert rest == passes[1][3:] and after == passes[2]


def _weighted(seed: int) -> PreparedDataLoader:
    """12 samples, a WeightedRandomSampler drawing 9 a pass from its own generator, batches of 3."""
    sampler = WeightedRandomSampler(torch.arange(1.0, 13.0), 9, replacement=True,
                                    generator=torch.Generator().manual_seed(seed))
    return PreparedDataLoader(DataLoader(TensorDataset(torch.arange(12)), batch_size=3, sampler=sampler),
                              0, 1, torch.device("cpu"), DataState())


def test_a_custom_sampler_resumed_mid_pass_continues_its_draw_and_the_draws_after_it() -> None:
    """The same for a custom sampler with its own generator: its pass's draw and the state of its
    generator travel in the entry. Without them the resumed pass was redrawn from wherever the
    destination's sampler stood: other samples for the rest of the epoch, and for every epoch after."""
    uninterrupted = _weighted(9)
    passes = [[int(x) for (b,) in uninterrupted for x in b] for _ in range(3)]
    assert len(passes[0]) == 9 and len({tuple(p) for p in passes}) == 3
    interrupted = _weighted(9)
    _ = [b for b in interrupted]
    iterator = iter(interrupted)
    next(iterator)
    entry = interrupted.progress()
    assert entry["order"] == passes[1] and entry["generator_state"] is not None and not entry["shuffled"]

    resumed = _weighted(1234)
    resumed.restore(entry, 0)
    rest = [int(x) for (b,) in resumed.iterate(skip=resumed.resume_skip) for x in b]
    after = [int(x) for (b,) in resumed for x in b]
    assert rest == passes[1][3:] and after == passes[2]


def test_a_format_2_shuffled_entry_resumes_its_epoch_in_the_old_order_with_a_warning() -> None:
    entry = {"epoch": 1, "batches_consumed": 2, "batches_in_epoch": 4, "samples_consumed": 6,
             "global_batch_size": 3, "num_samples": 12, "shuffle_seed": 7}
    loader = _twelve(9)
    with pytest.warns(UserWarning, match="format 2 shuffled its dataloader with seed \\+ epoch"):
        loader.restore(entry, 0)
    old_order = torch.randperm(12, generator=torch.Generator().manual_seed(7 + 1)).tolist()
    assert [int(x) for (b,) in loader.iterate(skip=loader.resume_skip) for x in b] == old_order[6:]


@pytest.mark.parametrize("how", ["skip_first_batches", "the loader itself"])
def test_a_checkpoint_at_the_last_batch_of_a_pass_resumes_at_the_next_epochs_start(how: str) -> None:
    """The checkpoint a user writes once per epoch, after the epoch's last optimizer step, inside
    the loop. Restored, the loader is at the next epoch with nothing to skip, so the next pass is
    the uninterrupted run's next one whether the loop asks skip_first_batches for the rest (docs)
    or iterates the loader for its next epoch (Hugging Face's examples at an epoch checkpoint).
    The core restored it as the finished epoch with the whole pass to skip, and the loader itself
    then replayed the finished epoch's order."""
    uninterrupted = _twelve(9)
    passes = [[int(x) for (b,) in uninterrupted for x in b] for _ in range(3)]
    interrupted = _twelve(9)
    _ = [int(x) for (b,) in interrupted for x in b]  # epoch 0, whole
    iterator = iter(interrupted)
    for _batch in range(len(interrupted)):  # epoch 1, to its last batch; the save comes here
        next(iterator)
    entry = interrupted.progress()
    assert entry["epoch"] == 1 and entry["batches_consumed"] == entry["batches_in_epoch"] == 4

    resumed = _twelve(1234)  # another seed: only the checkpoint can put it back
    resumed.restore(entry, 0)
    assert (resumed.epoch, resumed.resume_skip) == (2, 0)
    rest = resumed.iterate(skip=resumed.resume_skip) if how == "skip_first_batches" else resumed
    assert [int(x) for (b,) in rest for x in b] == passes[2]


@pytest.mark.parametrize("where", ["at the last batch", "between passes"])
def test_the_pass_after_an_epoch_checkpoint_draws_its_base_seed_as_the_uninterrupted_one(where: str) -> None:
    """A loader in order still draws its iterator's base seed from the global stream when a pass
    starts. A pass restored mid-way must not draw again (the uninterrupted run drew before the
    checkpoint); a pass that starts after the checkpoint must, or every random number after it
    (dropout masks) is one draw off the uninterrupted run."""
    def make() -> PreparedDataLoader:
        return PreparedDataLoader(DataLoader(TensorDataset(torch.arange(12)), batch_size=3), 0, 1,
                                  torch.device("cpu"), DataState())

    torch.manual_seed(0)
    loader = make()
    iterator = iter(loader)
    for _batch in range(len(loader)):
        next(iterator)
    if where == "between passes":
        assert next(iterator, None) is None  # the pass ends: the loop has left it
    entry, saved_rng = loader.progress(), torch.get_rng_state()
    if where == "at the last batch":
        assert next(iterator, None) is None
    _ = [b for b in loader]  # the next pass, uninterrupted
    expected = torch.rand(3)

    resumed = make()
    torch.set_rng_state(saved_rng)
    resumed.restore(entry, 0)
    _ = [b for b in resumed.iterate(skip=resumed.resume_skip)]
    assert torch.equal(torch.rand(3), expected)
