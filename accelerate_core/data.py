"""Dataloader sharding: N ranks with per-process batch B train like one process with batch N x B.

Every rank uses the same global order of sample indices: for a shuffling loader, the order the
user's own sampler gives in this pass, drawn from the user's generator exactly as a plain
single-process DataLoader draws it (its worker base seed, then the permutation), so one process
through the core sees the batches plain PyTorch sees, and N processes see them split; with several
processes rank 0's order is broadcast, and so is a custom sampler's (a sampler without a generator
draws from each rank's global random stream, which need not agree). Global step i takes the samples
order[i*N*B : (i+1)*N*B]; rank r takes the r-th block of B of them. With several processes a short
last global batch is filled by wrapping around to the start of the order, so every rank has B
samples (as Hugging Face Accelerate's `even_batches` does) and the padding sits at the END of the
rank-ordered concatenation that `gather` returns; `gather_for_metrics` cuts exactly that padding
off, which it learns from the loader being iterated (DataState). One process has no ranks to keep
even: its short last batch stays short, the batch a plain DataLoader yields (padding it trained
the last step of every epoch on repeated samples that plain PyTorch never sees).

Resuming (docs/checkpoint-format.md): a loader reports its epoch and how far into the epoch's
global order the loop has got (`progress()`), in samples, so a run at another world size with the
same global batch resumes at the same sample; a shuffling loader, or one with a custom sampler, also
saves the order of the epoch being iterated and the state of the generator it was drawn from, so the
resumed pass and every later one see the orders of the uninterrupted run. `restore()` sets these
back and remembers the position; `skip_first_batches(loader)` then starts the next pass there.
"""

from __future__ import annotations

import base64
import itertools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, Sampler, SequentialSampler

from accelerate_core.checkpoint.layout import CheckpointError
from accelerate_core.errors import UnsupportedObjectError, explain
from accelerate_core.ops import broadcast_object, send_to_device


def legacy_shuffled_order(num_samples: int, seed: int, epoch: int) -> list[int]:
    """The order a format-2 checkpoint's shuffled loader was iterated in (a permutation seeded with
    `seed + epoch`, which the core used before it followed the DataLoader's own draws)."""
    generator = torch.Generator().manual_seed(seed + epoch)
    return torch.randperm(num_samples, generator=generator).tolist()


class ShardedBatchSampler(Sampler[list[int]]):
    """Yields this rank's block of every global batch (see the module docstring)."""

    def __init__(self, order: Callable[[int], list[int]], num_samples: int, batch_size: int,
                 rank: int, world_size: int, drop_last: bool = False) -> None:
        self.order = order
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.drop_last = drop_last
        self.epoch = 0
        self.skip = 0  # batches to leave out at the start of the next iteration (resume)

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    def __len__(self) -> int:
        full, rest = divmod(self.num_samples, self.global_batch_size)
        return full if self.drop_last or rest == 0 else full + 1

    @property
    def pads(self) -> bool:
        """Whether a short last global batch is filled up: only to keep several ranks even."""
        return self.world_size > 1

    @property
    def remainder(self) -> int:
        """Real samples in a padded last global batch (0 when it is full, dropped, or not padded)."""
        if self.drop_last or not self.pads:
            return 0
        return self.num_samples % self.global_batch_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        # Read epoch and skip now, not at the first next(): the loader resets skip right after
        # creating its iterator.
        return self._batches(self.epoch, self.skip)

    def _batches(self, epoch: int, skip: int) -> Iterator[list[int]]:
        order = self.order(epoch)
        size = self.global_batch_size
        start = self.rank * self.batch_size
        for step in range(skip, len(self)):
            block = order[step * size:(step + 1) * size]
            if len(block) < size and order and self.pads:
                # Wrap around (repeatedly, for a dataset smaller than one global batch).
                block += list(itertools.islice(itertools.cycle(order), size - len(block)))
            yield block[start:start + self.batch_size]


@dataclass
class DataState:
    """Which prepared loader is being iterated and whether its last batch was just yielded."""

    stack: list[PreparedDataLoader] = field(default_factory=list)
    end_of_dataloader: bool = False

    @property
    def active(self) -> PreparedDataLoader | None:
        return self.stack[-1] if self.stack else None


class PreparedDataLoader:
    """A DataLoader over this rank's shard, yielding batches already on the device."""

    def __init__(self, loader: DataLoader[Any], rank: int, world_size: int, device: torch.device,
                 state: DataState) -> None:
        self.base = loader
        self.device = device
        self.state = state
        self.epoch = 0
        #: batches of the current epoch handed to the loop (skipped ones of a resumed pass included)
        self.position = 0
        #: batches the next skip_first_batches(loader) leaves out, set by restore()
        self.resume_skip = 0
        if loader.batch_size is None or isinstance(loader.dataset, IterableDataset):
            raise _unsupported(loader, "it has a custom batch_sampler or an IterableDataset, which the "
                               "core cannot shard so that every rank sees a disjoint block")
        sampler = loader.sampler
        num_samples = len(loader.dataset)  # type: ignore[arg-type]
        self.world_size = world_size
        self.shuffled = isinstance(sampler, RandomSampler)
        #: a sampler that is neither a RandomSampler nor a SequentialSampler: its order is saved too
        self.custom = not isinstance(sampler, (RandomSampler, SequentialSampler))
        #: the generator each pass's order is drawn from (saved and restored with it): the loader's
        #: for a shuffling loader (DataLoader(shuffle=True, generator=g) hands g to its RandomSampler),
        #: a custom sampler's own (`sampler.generator`, as torch's samplers name it), if any
        self._order_generator: torch.Generator | None = (
            getattr(sampler, "generator", None) if self.custom else loader.generator)
        #: the order of the pass being iterated (saved by progress(), for a resumed pass)
        self.current_order: list[int] = []
        #: the order of a pass restored from a checkpoint, used instead of drawing one
        self._restored_order: list[int] | None = None
        #: the next pass continues one restored from a checkpoint (restore() sets it)
        self._restored_pass = False
        order: Callable[[int], list[int]]
        if isinstance(sampler, RandomSampler):
            if sampler.replacement or sampler.num_samples != num_samples:
                raise _unsupported(loader, "its RandomSampler samples with replacement or a custom count")
            shuffling: Sampler[int] = sampler
            order = lambda _epoch: self._pass_order(lambda: list(iter(shuffling)))  # noqa: E731
        elif isinstance(sampler, SequentialSampler):
            order = lambda _epoch: list(range(num_samples))  # noqa: E731
        else:
            # A custom sampler (WeightedRandomSampler, SubsetRandomSampler, the user's own) may draw
            # from each rank's global random stream, which need not agree between ranks (a seed
            # offset by rank): every rank draws, as a plain loop would, and rank 0's order is used.
            custom: Sampler[Any] = sampler  # type: ignore[assignment]
            order = lambda epoch: self._pass_order(lambda: _custom_order(custom, epoch))  # noqa: E731
            num_samples = len(sampler)  # type: ignore[arg-type]
        self.batch_sampler = ShardedBatchSampler(order, num_samples, loader.batch_size, rank, world_size,
                                                 loader.drop_last)
        extra: dict[str, Any] = {}
        if loader.num_workers > 0:
            extra = {"prefetch_factor": loader.prefetch_factor,
                     "persistent_workers": loader.persistent_workers}
        self.loader = DataLoader(
            loader.dataset, batch_sampler=self.batch_sampler, num_workers=loader.num_workers,
            collate_fn=loader.collate_fn, pin_memory=loader.pin_memory, timeout=loader.timeout,
            worker_init_fn=loader.worker_init_fn, multiprocessing_context=loader.multiprocessing_context,
            generator=loader.generator, **extra,
        )

    @property
    def dataset(self) -> Any:
        return self.base.dataset

    @property
    def batch_size(self) -> int:
        return self.batch_sampler.batch_size

    @property
    def total_batch_size(self) -> int:
        return self.batch_sampler.global_batch_size

    @property
    def remainder(self) -> int:
        return self.batch_sampler.remainder

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        return self.iterate(skip=0)

    def _pass_order(self, draw: Callable[[], list[int]]) -> list[int]:
        """The order of the pass starting now for a shuffling or custom sampler: a restored one,
        else the user's sampler's draw (rank 0's when there are several processes)."""
        if self._restored_order is not None:
            order, self._restored_order = self._restored_order, None
        else:
            order = draw()
            if self.world_size > 1:
                order = broadcast_object(order)
        self.current_order = order
        return order

    def iterate(self, skip: int) -> Iterator[Any]:
        """Iterate the current epoch from batch `skip` on (skipped batches are never loaded).
        Without set_epoch calls the epoch advances by itself after each complete pass."""
        self.batch_sampler.set_epoch(self.epoch)
        self.batch_sampler.skip = skip
        self.resume_skip = 0
        self.position = skip
        # A restored pass draws nothing: the uninterrupted run drew its base seed and order before
        # it saved, and the generator and random streams are already where they were then. So for
        # a loader in order too: its iterator draws a base seed from the global stream, which would
        # put every random number after the resume (dropout masks) one draw off the uninterrupted run.
        streams = _RandomStreams(self.base.generator) if self._restored_pass else None
        self._restored_pass = False
        try:
            iterator = iter(self.loader)  # reads the batch sampler (and its skip) now
        finally:
            self.batch_sampler.skip = 0
            if streams is not None:
                streams.put_back()
        last = len(self) - 1
        self.state.stack.append(self)
        try:
            for index, batch in enumerate(iterator, start=skip):
                self.state.end_of_dataloader = index == last
                self.position = index + 1
                yield send_to_device(batch, self.device)
        finally:
            self.state.stack.remove(self)
            self.state.end_of_dataloader = False
        self.epoch += 1
        self.position = 0

    # -- checkpoints ----------------------------------------------------------------------------
    def progress(self) -> dict[str, Any]:
        """This loader's entry of progress.json."""
        sampler = self.batch_sampler
        generator = self._order_generator
        drawn = self.shuffled or self.custom
        return {"epoch": self.epoch, "batches_consumed": self.position, "batches_in_epoch": len(self),
                "samples_consumed": min(self.position * sampler.global_batch_size, sampler.num_samples),
                "global_batch_size": sampler.global_batch_size, "num_samples": sampler.num_samples,
                "shuffled": self.shuffled,
                # The pass being iterated (null between passes or when in order), and the state of
                # the generator it was drawn from, after this pass's draws (null: none, or in order).
                "order": self.current_order if drawn and self.position else None,
                "generator_state": (base64.b64encode(generator.get_state().numpy().tobytes()).decode("ascii")
                                    if drawn and isinstance(generator, torch.Generator) else None)}

    def restore(self, entry: dict[str, Any], index: int) -> None:
        """Epoch, shuffle seed and position from a progress.json entry, the position converted to
        this run's global batch size."""
        sampler = self.batch_sampler
        legacy_seed = entry.get("shuffle_seed")  # format 2: a seed instead of the order itself
        shuffled = bool(entry.get("shuffled", legacy_seed is not None))
        if int(entry["num_samples"]) != sampler.num_samples or shuffled != self.shuffled:
            raise CheckpointError(explain(
                f"load_state: dataloader {index} was saved over {entry['num_samples']} samples "
                f"({'shuffled' if shuffled else 'in order'})",
                f"the prepared one has {sampler.num_samples} samples "
                f"({'shuffled' if self.shuffled else 'in order'})",
                "the same dataset and shuffling as the run that saved it",
                "prepare the same dataloaders, in the same order, as the run that saved it"))
        consumed, size = int(entry["samples_consumed"]), sampler.global_batch_size
        # Saved at the last batch of a pass (the checkpoint a user writes once per epoch): that
        # epoch is done, so the loader stands at the next one's start, nothing to skip, and its
        # next pass is an ordinary one, as in the uninterrupted run. Saved mid-pass: the rest of
        # that pass, its order and random draws already made before the checkpoint.
        finished = int(entry["batches_consumed"]) >= int(entry["batches_in_epoch"])
        if finished:
            skip = 0
        elif consumed % size == 0:
            skip = consumed // size
        else:
            raise CheckpointError(explain(
                f"load_state: dataloader {index} stopped {consumed} samples into epoch {entry['epoch']} "
                f"(global batch {entry['global_batch_size']})",
                f"that is not a whole number of this run's global batches of {size} "
                f"({sampler.batch_size} per process x {sampler.world_size} processes)",
                f"a per-process batch size x processes that divides {consumed}",
                f"resume with a global batch of {entry['global_batch_size']} (per-process batch = "
                f"{entry['global_batch_size']} / processes), or save at an epoch boundary"))
        if shuffled or self.custom:
            self._restore_order(entry, legacy_seed, finished)
        self.epoch = int(entry["epoch"]) + (1 if finished else 0)
        self.position = 0
        self.resume_skip = skip
        # Only a pass interrupted mid-way drew its order and base seed before the checkpoint.
        self._restored_pass = not finished and int(entry["batches_consumed"]) > 0

    def _restore_order(self, entry: dict[str, Any], legacy_seed: Any, finished: bool) -> None:
        order = None if finished else entry.get("order")  # a finished pass leaves nothing to replay
        if legacy_seed is not None:
            warnings.warn(
                "load_state: a checkpoint of format 2 shuffled its dataloader with seed + epoch; the "
                "interrupted epoch resumes in that order, later epochs are shuffled as the DataLoader "
                "itself shuffles (its sampler's draws), as this version of the core does", stacklevel=3)
            if not finished:
                order = legacy_shuffled_order(int(entry["num_samples"]), int(legacy_seed),
                                              int(entry["epoch"]))
        self._restored_order = [int(i) for i in order] if order else None
        state, generator = entry.get("generator_state"), self._order_generator
        if state is not None and isinstance(generator, torch.Generator):
            generator.set_state(torch.frombuffer(bytearray(base64.b64decode(state)), dtype=torch.uint8))


class _RandomStreams:
    """The global CPU random stream and a loader's generator, as they are now, to put back."""

    def __init__(self, generator: torch.Generator | None) -> None:
        self.generator = generator
        self.cpu = torch.random.get_rng_state()
        self.saved = generator.get_state() if generator is not None else None

    def put_back(self) -> None:
        torch.random.set_rng_state(self.cpu)
        if self.generator is not None and self.saved is not None:
            self.generator.set_state(self.saved)


class SkippedDataLoader:
    """`skip_first_batches(loader, k)`: one pass over `loader` that starts at batch k
    (k None: where load_state left it, 0 when nothing was restored)."""

    def __init__(self, loader: PreparedDataLoader, skip: int | None) -> None:
        self.loader = loader
        self.skip = loader.resume_skip if skip is None else skip

    def __len__(self) -> int:
        return max(len(self.loader) - self.skip, 0)

    def __iter__(self) -> Iterator[Any]:
        return self.loader.iterate(skip=self.skip)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)


def _custom_order(sampler: Sampler[Any], epoch: int) -> list[int]:
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)
    return list(iter(sampler))


def _unsupported(loader: DataLoader[Any], why: str) -> UnsupportedObjectError:
    return UnsupportedObjectError(
        explain(
            f"prepare() got a DataLoader over {type(loader.dataset).__name__}",
            why,
            "a DataLoader with batch_size=B over a map-style dataset, with shuffle=True/False or a "
            "sampler that gives the same order on every rank",
            "build the DataLoader with batch_size= and shuffle= (no batch_sampler)",
        )
    )

