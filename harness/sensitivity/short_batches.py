"""Catalog entries of the short last batch: a training set that is not a whole number of global
batches (the `uneven` task, harness/tasks/uneven.py). On one process the core must yield the plain
DataLoader's batches, the short one included, and count it in `len()`; its two-process cells are
declared failures (the padding that keeps ranks even), so these entries are judged on one process.
"""

from __future__ import annotations

from harness.sensitivity.bug import Bug

# PreparedDataLoader building its sampler, up to the argument that carries the user's drop_last.
_SHARDED_SAMPLER = ("self.batch_sampler = ShardedBatchSampler(order, num_samples, loader.batch_size, rank, "
                    "world_size,\n" + " " * 49)

SHORT_BATCH_BUGS: tuple[Bug, ...] = (
    Bug(
        name="short_batch_padded_on_one_process",
        area="sharding",
        file="data.py",
        search="if len(block) < size and order and self.pads:",
        replace="if len(block) < size and order:",
        select="uneven-cpu1-single-fp32",
        affects="uneven and cpu1",
        imitates="the padding that keeps several ranks even applied to one process too (this core before "
                 "this release; Accelerate shards, and pads, a loader only for several processes): the last "
                 "step of every epoch trains on repeated samples (documented: torch.utils.data.DataLoader, "
                 "\"If False and the size of dataset is not divisible by the batch size, then the last batch "
                 "will be smaller\")",
    ),
    Bug(
        name="loader_len_floors_the_short_batch",
        area="sharding",
        file="data.py",
        search="    def __len__(self) -> int:\n        return len(self.batch_sampler)\n",
        replace=("    def __len__(self) -> int:\n"
                 "        return self.batch_sampler.num_samples // self.batch_sampler.global_batch_size\n"),
        select="uneven-cpu1-single-fp32",
        affects="uneven and cpu1",
        imitates="len(dataloader) that floors samples / batch while iteration still yields the short last "
                 "batch: the user loop's `step == len(tr_data) - 1` never fires on the last batch, whose "
                 "gradient leaks into the next epoch's first optimizer step (no upstream report found; "
                 "imitates the kind of bug: the last batch counts, documented: torch.utils.data.DataLoader, "
                 "\"If False and the size of dataset is not divisible by the batch size, then the last batch "
                 "will be smaller\")",
    ),
    Bug(
        name="drop_last_not_passed_to_the_sharded_sampler",
        area="sharding",
        file="data.py",
        search=f"{_SHARDED_SAMPLER}loader.drop_last)",
        replace=f"{_SHARDED_SAMPLER}False)",
        select="uneven_drop-cpu2-ddp-fp32",
        affects="uneven_drop and cpu",
        imitates="the user's drop_last lost where the core rebuilds the DataLoader: the short last batch is "
                 "trained on (padded on several processes), an extra micro-step every epoch "
                 "(huggingface/accelerate#209: drop_last not passed to the DispatchDataLoader, fixed by "
                 "huggingface/accelerate#212)",
    ),
)
