"""The FSDP2 strategy (registered as fsdp): strategy.py is the Strategy itself, wrap.py chooses
the units and calls `fully_shard`, state.py moves state dicts and optimizer state between the
shards and the neutral checkpoint format.

Nothing is imported here: the registry imports strategy.py only when FSDP is asked for.
"""
