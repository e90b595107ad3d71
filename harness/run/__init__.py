"""Running cells: grouping them into launches by shape, launching through torch.distributed.run,
timeouts, process tracking, signals and crash evidence."""
