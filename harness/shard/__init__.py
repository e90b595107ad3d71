"""Shards: one environment's selection split over several machines (docs/shards.md).

`python -m harness run --shard K/N` runs the K-th of N disjoint parts of the selection
(harness.shard.split, balanced by harness.shard.costs); each shard's report.json says which part
it ran and what it ran against (harness.shard.identity); `python -m harness report merge` puts the
shards of one environment back together (harness.shard.combine).
"""
