"""Run on every rank of a 2-process launch: DeepSpeed 0.19.8 ALONE (no accelerate_core), on the
harness tasks' models, to keep visible the DeepSpeed failures the core has to reconcile or
declare. Rank 0 writes one JSON line per (task, stage) to --out: ok, or the error's last line.

    python -m torch.distributed.run --nproc_per_node 2 deepspeed_alone.py \
        --tasks root_param,scalar --stages 2,3 --out results.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

from accelerate_core.state import shutdown_process_group  # exit cleanup only, no training code
from harness.tasks import get_task


def one_step(task_name: str, stage: int) -> dict[str, object]:
    import deepspeed

    task = get_task(task_name)
    torch.manual_seed(0)
    model = task._make_model()
    optimizer = task._make_optimizer(model)
    batch = task._make_data(4, torch.Generator().manual_seed(1))
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": stage}, "zero_allow_untested_optimizer": True}
    entry: dict[str, object] = {"task": task_name, "stage": stage}
    engine = None
    try:
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config,
                                               dist_init_required=False)
        output = engine(**batch)  # the task's plain dataclass output, as the user loop reads it
        engine.backward(output.loss)
        engine.step()
        entry.update(ok=True)
    except Exception as exc:  # the failure itself is the result
        entry.update(ok=False, error=f"{type(exc).__name__}: {exc}")
    finally:
        if engine is not None:
            engine.destroy()
    return entry


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", required=True)
    parser.add_argument("--stages", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    dist.init_process_group("gloo")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    lines = [one_step(name, int(stage)) for name in args.tasks.split(",") for stage in args.stages.split(",")]
    if dist.get_rank() == 0:
        with open(args.out, "a") as handle:
            handle.writelines(json.dumps(entry) + "\n" for entry in lines)
    shutdown_process_group()  # destroy_process_group alone can abort at exit: see its docstring


if __name__ == "__main__":
    main()
