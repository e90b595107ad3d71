"""A rank program that never finishes: rank 1 waits in a barrier rank 0 never reaches, as a
DeepSpeed reproduction failing on one rank leaves the other (seen with DeepSpeed 0.17.6)."""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(hours=1))
    if dist.get_rank() == 1:
        dist.barrier()
    time.sleep(3600)
    sys.exit(0)
