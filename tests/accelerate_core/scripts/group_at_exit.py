"""Says, from the script's own exit hook, whether the default process group still exists then.

Run on every rank of a launch; each rank writes "initialized" or "destroyed" to --out/rank<R>.
--own-group: the script creates the group before the Accelerator, which then reuses it.
Neither way does the script call destroy_process_group (the user loop, docs/the-user-loop.md,
does not either). `main(argv)` returns the Accelerator: run first in a launch of
scripts/scenarios.py (test_process_group_exit.py's part of the tests' shared launch), its hook
reports on the group the core created, at the end of every run of that launch.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from accelerate_core import Accelerator


def report_group(path: Path) -> None:
    """Registered before the core's exit hook, so it runs after it (atexit is last-in first-out)."""
    path.write_text("initialized" if dist.is_initialized() else "destroyed")


def main(argv: list[str] | None = None) -> Accelerator:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--own-group", action="store_true")
    args = parser.parse_args(argv)
    atexit.register(report_group, args.out / f"rank{os.environ['RANK']}")
    if args.own_group:
        dist.init_process_group("gloo")
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    accelerator.backward(model(torch.ones(4, 2)).sum())
    accelerator.wait_for_everyone()
    return accelerator


if __name__ == "__main__":
    main()
