"""What each rank runs for the behaviour probe: DeepSpeed ALONE (no accelerate_core training
code) on the harness tasks' models, one reproduction per behaviour of
harness/versions/behaviours.py and ZeRO stage, in one 2-process launch.

    python -m torch.distributed.run --standalone --nproc_per_node 2 \
        -m harness.rank.deepspeed_alone OUT.jsonl

Rank 0 writes one JSON line per (behaviour, stage): ok or the error, the side effect seen, and
whether the core's gate for that reconciliation is on with this release (the gates only read
DeepSpeed; they patch nothing). A reproduction's failure is its result, never this script's.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from typing import Any

import torch
import torch.distributed as dist

from harness.tasks import get_task
from harness.versions.behaviours import BEHAVIOURS, Behaviour, Observation


def _gate(behaviour: Behaviour) -> bool | None:
    from accelerate_core.strategies.deepspeed import compat as deepspeed_compat

    if behaviour.key == "zero_dim_broadcast":
        return deepspeed_compat.zero_dim_reconciliation_applies()
    if behaviour.key == "zero3_dataclass_output":
        return deepspeed_compat.zero3_hooks_miss_dataclass_outputs()
    return None  # restore_functional_linear acts only on the swap itself: nothing to gate


def reproduce(behaviour: Behaviour, stage: int) -> Observation:
    import deepspeed

    task = get_task(behaviour.task)
    torch.manual_seed(0)
    model = task._make_model()
    optimizer = task._make_optimizer(model)
    batch = task._make_data(4, torch.Generator().manual_seed(1))
    zero: dict[str, Any] = {"stage": stage}
    if behaviour.key == "zero3_linear_left_swapped":
        zero["memory_efficient_linear"] = True
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
              "zero_optimization": zero, "zero_allow_untested_optimizer": True}
    linear = torch.nn.functional.linear
    engine = None
    error = ""
    try:
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config,
                                               dist_init_required=False)
        output = engine(**batch)  # the task's plain dataclass output, as the user loop reads it
        engine.backward(output.loss)
        engine.step()
    except Exception as exc:  # the failure itself is the result
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
    finally:
        if engine is not None:
            engine.destroy()
    swapped = torch.nn.functional.linear is not linear
    if swapped:  # leave the process as found, for the next reproduction
        torch.nn.functional.linear = linear
    return Observation(behaviour.key, stage, not error, error, side_effect=swapped, gate_on=_gate(behaviour))


def main(argv: list[str]) -> int:
    out = argv[0]
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    dist.init_process_group("gloo")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    seen = [reproduce(b, stage) for b in BEHAVIOURS for stage in b.stages]
    if dist.get_rank() == 0:
        with open(out, "w") as handle:
            handle.writelines(json.dumps(asdict(o)) + "\n" for o in seen)
    from accelerate_core.state import shutdown_process_group  # exit cleanup only

    shutdown_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
