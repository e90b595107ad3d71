"""The user loop (docs/the-user-loop.md), run through accelerate_core (one process or under torchrun).

The loop body is the user loop's, plus lines that record what happened (marked `# record`) and the
test-only hooks: --inject-overflow-step (makes one optimizer step's gradients non-finite),
--save-state-at / --resume-from (checkpoint and resume). Rank 0 writes, under --out DIR,
model.pt (the user loop's `accelerator.save(accelerator.get_state_dict(model), path)`) and
record.pt (per-micro-step losses, per-optimizer-step overflow flags and learning rates, loss
scales, gathered eval outputs). Flags are relied on by the DeepSpeed tests: keep them stable.
`main(argv)` returns its Accelerator, so scripts/scenarios.py can free it and run the next
configuration in the same launch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo root, for `tests.*`

from accelerate_core import Accelerator, DeepSpeedPlugin, FSDPPlugin
from tests.accelerate_core.scripts.task import (
    EVAL_DATA_SEED,
    SHUFFLE_SEED,
    TRAIN_DATA_SEED,
    SyntheticClassification,
    TaskConfig,
    make_model,
    make_optimizer,
    make_scheduler,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mixed-precision", default="no", choices=["no", "fp16", "bf16"])
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--zero-stage", type=int, default=None, help="use DeepSpeedPlugin(zero_stage=N)")
    p.add_argument("--fsdp", action="store_true", help="use FSDPPlugin() (FSDP2, default wrapping)")
    p.add_argument("--inject-overflow-step", type=int, default=None)
    p.add_argument("--epochs", type=int, default=TaskConfig.epochs)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--save-state-at", type=int, default=None, help="optimizer step after which to checkpoint")
    p.add_argument("--state-dir", type=Path, default=None)
    p.add_argument("--resume-from", type=Path, default=None)
    return p.parse_args(argv)


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    """This rank's view of the weights as one fp32 vector (partitioned under ZeRO-3; this rank's
    shards of the DTensor parameters under FSDP)."""
    local = [p.to_local() if isinstance(p, DTensor) else p for p in model.parameters()]
    return torch.cat([p.detach().float().reshape(-1).cpu() for p in local])


def main(argv: list[str] | None = None) -> Accelerator:
    args = parse_args(argv)
    config = TaskConfig(mixed_precision=args.mixed_precision, epochs=args.epochs)
    if args.inject_overflow_step is not None and args.mixed_precision != "fp16":
        sys.exit("--inject-overflow-step needs --mixed-precision fp16 (only loss scaling can skip a step)")
    gradient_accumulation_steps = config.gradient_accumulation_steps
    plugin = DeepSpeedPlugin(zero_stage=args.zero_stage) if args.zero_stage is not None else None
    # The user loop writes Accelerator(fp16=True); the other precisions go by name.
    precision: dict[str, Any] = (
        {"fp16": True} if args.mixed_precision == "fp16" else {"mixed_precision": args.mixed_precision}
    )
    accelerator = Accelerator(**precision, cpu=args.cpu or None, deepspeed_plugin=plugin,
                              fsdp_plugin=FSDPPlugin() if args.fsdp else None,
                              gradient_accumulation_steps=gradient_accumulation_steps)

    model = make_model()
    optimizer = make_optimizer(model, config)
    lr_scheduler = make_scheduler(optimizer)
    tr_data = DataLoader(SyntheticClassification(config.train_samples, TRAIN_DATA_SEED),
                         batch_size=config.batch_size, shuffle=True,
                         generator=torch.Generator().manual_seed(SHUFFLE_SEED))
    eval_data = DataLoader(SyntheticClassification(config.eval_samples, EVAL_DATA_SEED),
                           batch_size=config.batch_size, shuffle=False)
    model, optimizer, tr_data, eval_data, lr_scheduler = accelerator.prepare(
        model, optimizer, tr_data, eval_data, lr_scheduler)

    record: dict[str, list[Any]] = {k: [] for k in ("losses", "skipped", "lrs", "loss_scales", "params")}
    start_epoch, skip, opt_step = 0, 0, 0
    if args.resume_from is not None:
        accelerator.load_state(args.resume_from)
        progress = json.loads((args.resume_from / "loop_progress.json").read_text())
        start_epoch, skip, opt_step = progress["epoch"], progress["next_step"], progress["opt_step"]

    for e in range(start_epoch, config.epochs):
        batches = accelerator.skip_first_batches(tr_data, skip) if skip else tr_data
        for step, batch in enumerate(batches, start=skip):
            output = model(**batch)
            loss = output.loss / gradient_accumulation_steps
            boundary = (step + 1) % gradient_accumulation_steps == 0 or step == len(tr_data) - 1
            if boundary and opt_step == args.inject_overflow_step:
                loss = loss * float("inf")  # test hook: non-finite gradients at this step
            record["losses"].append(accelerator.reduce(output.loss.detach().float()).item())  # record
            accelerator.backward(loss)
            if (step + 1) % gradient_accumulation_steps == 0 or step == len(tr_data) - 1:
                optimizer.step()
                optimizer.zero_grad()
                if not optimizer.is_overflow:  # fp16 loss scaling skipped this step
                    lr_scheduler.step()
                record["skipped"].append(optimizer.is_overflow)  # record
                record["lrs"].append(optimizer.param_groups[0]["lr"])  # record
                record["loss_scales"].append(accelerator.precision.loss_scale)  # record
                record["params"].append(flat_params(accelerator.unwrap_model(model)))  # record
                opt_step += 1
                if opt_step == args.save_state_at:
                    accelerator.save_state(args.state_dir)
                    if accelerator.is_main_process:
                        progress = {"epoch": e, "next_step": step + 1, "opt_step": opt_step}
                        (args.state_dir / "loop_progress.json").write_text(json.dumps(progress))
                    accelerator.wait_for_everyone()
                    return accelerator
        skip = 0

    model.eval()
    gathered: dict[str, list[torch.Tensor]] = {
        k: [] for k in ("predictions", "labels", "metric_predictions", "metric_labels")
    }
    with torch.no_grad():
        for batch in eval_data:
            output = model(**batch)
            predictions = accelerator.gather(output)
            labels = accelerator.gather(batch["labels"])
            gathered["predictions"].append(predictions.logits)  # record
            gathered["labels"].append(labels)  # record
            gathered["metric_predictions"].append(accelerator.gather_for_metrics(output).logits)  # record
            gathered["metric_labels"].append(accelerator.gather_for_metrics(batch["labels"]))  # record

    accelerator.wait_for_everyone()
    unwrapped_model = accelerator.unwrap_model(model)
    # a full (consolidated) state dict, also under ZeRO-3, saved once:
    state_dict = accelerator.get_state_dict(model)
    if args.out is not None:
        accelerator.save(state_dict, args.out / "model.pt")
        full = {k: torch.cat(v).float().cpu() for k, v in gathered.items()}
        accelerator.save({**record, **full, "num_processes": accelerator.num_processes,
                          "unwrapped_keys": sorted(unwrapped_model.state_dict())}, args.out / "record.pt")
    accelerator.wait_for_everyone()
    return accelerator


if __name__ == "__main__":
    main()
