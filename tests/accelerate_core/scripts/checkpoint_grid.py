"""One 2-rank launch, many checkpoint pairs: run by test_checkpoint_portable.py.

Each phase is its own Accelerator in the same process group (as the harness reuses a launch).
Uninterrupted runs save_state at optimizer step SAVE_AT and go on to the end; resumed runs
load_state a checkpoint written by ANOTHER strategy (or world size: `--single-ckpt` comes from a
1-process run of the test) and finish the run. Rank 0 writes OUT/<phase>.pt (losses, lrs, the
final full state dict) and, for the zero3 run, OUT/model_zero3.pt through
`accelerator.save(accelerator.get_state_dict(model), path)`.

    checkpoint_grid.py --out DIR --single-ckpt DIR

`main(argv)` runs the phases in a launch of scripts/scenarios.py too (test_checkpoint_portable.py's
part of the tests' shared launch).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo root, for `tests.*`

from accelerate_core import Accelerator, DeepSpeedPlugin
from tests.accelerate_core.scripts.checkpoint_task import GAS, SHUFFLE_SEED, prepare, user_loop


def accelerator_for(strategy: str) -> Accelerator:
    if strategy == "ddp":
        return Accelerator(cpu=True, gradient_accumulation_steps=GAS)
    stage = int(strategy.removeprefix("zero"))
    # Threshold 0: ZeRO-3 partitions even these tiny parameters (by default it keeps any
    # parameter under 1e5 elements whole on every rank, and nothing would be re-partitioned).
    plugin = DeepSpeedPlugin(
        zero_stage=stage,
        config={
            "zero_optimization": {
                "stage3_param_persistence_threshold": 0,
                "stage3_max_reuse_distance": 0,
                "stage3_prefetch_bucket_size": 0,
            }
        },
    )
    return Accelerator(cpu=True, gradient_accumulation_steps=GAS, deepspeed_plugin=plugin)


def phase(
    strategy: str, out: Path, name: str, save_dir: Path | None = None, resume_from: Path | None = None
) -> None:
    accelerator = accelerator_for(strategy)
    # A resumed run draws another shuffle seed at prepare(): only load_state can bring the saved one back.
    model, optimizer, loader, scheduler = prepare(accelerator, SHUFFLE_SEED + (1 if resume_from else 0))
    if resume_from is not None:
        accelerator.load_state(resume_from)
    record: dict[str, Any] = user_loop(
        accelerator, model, optimizer, scheduler, loader, save_dir=save_dir, resume=resume_from is not None
    )
    record["partitioned"] = any(
        getattr(p, "ds_tensor", None) is not None and p.numel() == 0
        for p in accelerator.unwrap_model(model).parameters()
    )
    if name == "zero3_full":  # the MISSION's save of a consolidated state dict, from ZeRO-3
        accelerator.save(record["state_dict"], out / "model_zero3.pt")
    accelerator.save(record, out / f"{name}.pt")
    accelerator.wait_for_everyone()
    accelerator.free_memory()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--single-ckpt", type=Path, required=True)
    args = parser.parse_args(argv)
    out: Path = args.out
    phase("zero3", out, "zero3_full", save_dir=out / "ckpt_zero3")
    phase("ddp", out, "ddp_full", save_dir=out / "ckpt_ddp")
    phase("zero2", out, "zero2_full", save_dir=out / "ckpt_zero2")
    phase("ddp", out, "ddp_from_zero2", resume_from=out / "ckpt_zero2")
    phase("ddp", out, "ddp_from_zero3", resume_from=out / "ckpt_zero3")
    phase("zero1", out, "zero1_from_zero3", resume_from=out / "ckpt_zero3")
    phase("zero3", out, "zero3_from_ddp", resume_from=out / "ckpt_ddp")
    phase("zero2", out, "zero2_from_single", resume_from=args.single_ckpt)
    phase("zero3", out, "zero3_from_single", resume_from=args.single_ckpt)


if __name__ == "__main__":
    main()
    # Alone in its launch: the group can go now. Run by scripts/scenarios.py, other runs follow
    # in the same group (the core destroys it at exit either way).
    torch.distributed.destroy_process_group()
