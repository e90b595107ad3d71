"""Catalog entries of a custom sampler: a training DataLoader built with `sampler=` (the `weighted`
task's WeightedRandomSampler, harness/tasks/weighted.py). The core must take the order the user's
sampler draws in each pass, as many indices as the sampler gives, and shard it; the golden iterates
the same sampler in a plain DataLoader.
"""

from __future__ import annotations

from harness.sensitivity.bug import Bug

_CUSTOM_ORDER = ("            order = lambda epoch: self._pass_order(lambda: _custom_order(custom, epoch))"
                 "  # noqa: E731\n")

SAMPLER_BUGS: tuple[Bug, ...] = (
    Bug(
        name="custom_sampler_drawn_once",
        area="sharding",
        file="data.py",
        search=_CUSTOM_ORDER,
        replace=("            drawn = _custom_order(custom, 0)\n"
                 "            order = lambda epoch: self._pass_order(lambda: list(drawn))  # noqa: E731\n"),
        select="weighted-cpu2-ddp-fp32",
        affects="weighted and cpu",
        imitates="a distributed wrapper that materialises the custom sampler's indices once and shards that "
                 "list every epoch, so every epoch trains on the first epoch's draw "
                 "(Lightning-AI/pytorch-lightning#12959: its DistributedSamplerWrapper rebuilds the list "
                 "from the wrapped sampler in every __iter__, so that the sampler draws anew each epoch)",
    ),
    Bug(
        name="custom_sampler_length_from_dataset",
        area="sharding",
        file="data.py",
        search="            num_samples = len(sampler)  # type: ignore[arg-type]\n",
        replace="            pass\n",
        select="weighted-cpu2-ddp-fp32",
        affects="weighted and cpu",
        imitates="the epoch's length taken from the dataset rather than the sampler, which draws fewer "
                 "indices than the dataset holds: one process runs out of indices (an empty last batch), "
                 "several fill the missing global batch by wrapping around and train an extra step every "
                 "epoch (nitrain/nitrain#62: `len(loader.dataset)` does not account for a sampler that "
                 "changes the number of elements)",
    ),
)
