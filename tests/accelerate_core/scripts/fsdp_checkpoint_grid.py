"""Checkpoints between FSDP and the other backends, in one 2-rank launch: run by
test_fsdp_mission.py (its part of the tests' shared launch).

The phases are scripts/checkpoint_grid.py's (checkpoint_task.py's user loop, save_state at
optimizer step SAVE_AT, resume mid-epoch in a fresh Accelerator whose loader drew another
shuffle seed), with FSDP on one side of each pair:
- uninterrupted: fsdp_full (saves ckpt_fsdp), ddp_full (saves ckpt_ddp);
- resumed: ddp_from_fsdp, fsdp_from_ddp, fsdp_from_single (`--single-ckpt`, a 1-process run of
  the test), and with `--zero3`: zero3_from_fsdp, fsdp_from_zero3 (ZeRO-3 saves ckpt_zero3).
Rank 0 writes OUT/<phase>.pt (losses, lrs, the final full state dict).

    fsdp_checkpoint_grid.py --out DIR --single-ckpt DIR [--zero3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo root, for `tests.*`

from accelerate_core import Accelerator, FSDPPlugin
from tests.accelerate_core.scripts import checkpoint_grid
from tests.accelerate_core.scripts.checkpoint_task import GAS, SHUFFLE_SEED, prepare, user_loop


def accelerator_for(strategy: str) -> Accelerator:
    if strategy == "fsdp":
        return Accelerator(cpu=True, gradient_accumulation_steps=GAS, fsdp_plugin=FSDPPlugin())
    return checkpoint_grid.accelerator_for(strategy)


def phase(strategy: str, out: Path, name: str, save_dir: Path | None = None,
          resume_from: Path | None = None) -> None:
    accelerator = accelerator_for(strategy)
    model, optimizer, loader, scheduler = prepare(accelerator, SHUFFLE_SEED + (1 if resume_from else 0))
    if resume_from is not None:
        accelerator.load_state(resume_from)
    record: dict[str, Any] = user_loop(
        accelerator, model, optimizer, scheduler, loader, save_dir=save_dir, resume=resume_from is not None
    )
    record["strategy"] = accelerator.strategy.registered_name
    accelerator.save(record, out / f"{name}.pt")
    accelerator.wait_for_everyone()
    accelerator.free_memory()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--single-ckpt", type=Path, required=True)
    parser.add_argument("--zero3", action="store_true", help="also resume FSDP <-> ZeRO-3 (needs deepspeed)")
    args = parser.parse_args(argv)
    out: Path = args.out
    phase("fsdp", out, "fsdp_full", save_dir=out / "ckpt_fsdp")
    phase("ddp", out, "ddp_full", save_dir=out / "ckpt_ddp")
    phase("ddp", out, "ddp_from_fsdp", resume_from=out / "ckpt_fsdp")
    phase("fsdp", out, "fsdp_from_ddp", resume_from=out / "ckpt_ddp")
    phase("fsdp", out, "fsdp_from_single", resume_from=args.single_ckpt)
    if args.zero3:
        phase("zero3", out, "zero3_full", save_dir=out / "ckpt_zero3")
        phase("zero3", out, "zero3_from_fsdp", resume_from=out / "ckpt_fsdp")
        phase("fsdp", out, "fsdp_from_zero3", resume_from=out / "ckpt_zero3")


if __name__ == "__main__":
    main()
