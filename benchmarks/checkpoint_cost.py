"""What save_state + load_state cost for the lm task on 2 CPU processes, DDP against ZeRO-3,
and how big the backend-neutral checkpoint is against the model's fp32 bytes + the optimizer's.

Under ZeRO-3 every parameter and its optimizer state are gathered on save and re-partitioned on
load (collectives per parameter), where DDP has them whole: the ratio is that price. Times are
medians over a few repeats after 2 optimizer steps (so the optimizer has state); ratios hold
across machines better than absolute times. `--dim/--vocab` scale the task's model (its own
size, 16/24, is tiny: the times are then mostly fixed costs).

    python benchmarks/checkpoint_cost.py [--dim 16 --vocab 24] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def worker(args: argparse.Namespace) -> None:
    import torch
    from torch.utils.data import DataLoader

    from accelerate_core import Accelerator, DeepSpeedPlugin
    from harness.tasks import get_task

    task = dataclasses.replace(get_task("lm"), dim=args.dim, vocab=args.vocab, inject_overflow_step=None)
    results: dict[str, Any] = {}
    for strategy in ("ddp", "zero3"):
        plugin = None
        if strategy == "zero3":  # threshold 0: partition every parameter, as a large model would be
            plugin = DeepSpeedPlugin(
                zero_stage=3, config={"zero_optimization": {"stage3_param_persistence_threshold": 0}}
            )
        accelerator = Accelerator(cpu=True, deepspeed_plugin=plugin)
        model = task.build_model()
        optimizer = task.build_optimizer(model)
        scheduler = task.build_scheduler(optimizer)
        loader = DataLoader(task.train_dataset(), batch_size=task.per_process_batch_size(2), shuffle=False)
        model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
        batches = iter(loader)
        for _ in range(2):
            accelerator.backward(model(**next(batches)).loss)
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()
        saves, loads = [], []
        directory = Path(args.tmp) / strategy  # the parent's temporary directory: one path for all ranks
        for _ in range(args.repeats):
            accelerator.wait_for_everyone()
            start = time.perf_counter()
            accelerator.save_state(directory)
            saves.append(time.perf_counter() - start)
            accelerator.wait_for_everyone()
            start = time.perf_counter()
            accelerator.load_state(directory)
            loads.append(time.perf_counter() - start)
        size = sum(p.stat().st_size for p in directory.iterdir())
        files = {p.name: p.stat().st_size for p in directory.iterdir()}
        unwrapped = task.build_model()  # whole tensors, counted once (tied weights once)
        unique = {id(t): t for t in [*unwrapped.parameters(), *unwrapped.buffers()]}
        model_bytes = sum(t.numel() * 4 for t in unique.values())
        # SGD with momentum: one fp32 buffer per trainable parameter.
        optimizer_bytes = sum(p.numel() * 4 for p in unwrapped.parameters() if p.requires_grad)
        results[strategy] = {
            "save_s": statistics.median(saves),
            "load_s": statistics.median(loads),
            "checkpoint_bytes": size,
            "model_fp32_bytes": model_bytes,
            "optimizer_bytes": optimizer_bytes,
            "files": files,
        }
        accelerator.free_memory()
    if int(os.environ.get("RANK", "0")) == 0:
        Path(args.out).write_text(json.dumps(results, indent=1))
    torch.distributed.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tmp", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc_per_node",
                "2",
                __file__,
                "--worker",
                "--out",
                str(out),
                "--tmp",
                tmp,
                "--dim",
                str(args.dim),
                "--vocab",
                str(args.vocab),
                "--repeats",
                str(args.repeats),
            ],
            env=env,
            check=False,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            sys.exit(f"the 2-process run failed:\n{(result.stdout + result.stderr)[-4000:]}")
        results = json.loads(out.read_text())
    ddp, zero3 = results["ddp"], results["zero3"]
    print(f"lm task, dim {args.dim}, vocab {args.vocab}, 2 CPU processes, median of {args.repeats}")
    for name, r in results.items():
        print(
            f"  {name:<6} save_state {r['save_s'] * 1000:8.1f} ms   "
            f"load_state {r['load_s'] * 1000:8.1f} ms   total {(r['save_s'] + r['load_s']) * 1000:8.1f} ms"
        )
    ratio = (zero3["save_s"] + zero3["load_s"]) / (ddp["save_s"] + ddp["load_s"])
    print(f"  zero3 / ddp (save+load): x{ratio:.2f}")
    state = ddp["model_fp32_bytes"] + ddp["optimizer_bytes"]
    for name, r in results.items():
        print(
            f"  {name:<6} checkpoint {r['checkpoint_bytes']:,} bytes "
            f"= x{r['checkpoint_bytes'] / state:.2f} of model fp32 {r['model_fp32_bytes']:,} "
            f"+ optimizer {r['optimizer_bytes']:,} bytes"
        )


if __name__ == "__main__":
    main()
