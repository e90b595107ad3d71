"""One launch, many DeepSpeed checks: run under `torch.distributed.run` by test_deepspeed_*.py.

Each check builds its own Accelerator in the same process group (as the harness does), runs the
user loop (docs/the-user-loop.md) unchanged, writes what it observed to OUT/<name>.pt on rank 0, and frees
the Accelerator. The tests compare these records with a plain-PyTorch loop they run themselves
(`plain_reference` below imports nothing from accelerate_core).

    deepspeed_checks.py --out DIR --checks train:1:no,train:3:bf16,fp16:2,resume:3,misuse,fp16_refused

`main(argv)` is also what scripts/scenarios.py calls: the tests run these checks as their part
of the session's shared 2-rank launch (tests/accelerate_core/shared_launch.py).
"""

from __future__ import annotations

import argparse
import copy
import gc
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

EPOCHS = 2
GAS = 2
BATCH = 2  # per process
STEPS_PER_EPOCH = 13  # odd: the last accumulation of each epoch is short (one micro batch)
LR, WEIGHT_DECAY = 1e-2, 0.01
CLIP = 0.05  # below the task's gradient norms (about 0.1-0.5), so clipping acts on most steps


class Output(dict):  # what a HF-style model returns: attribute access to .loss
    __getattr__ = dict.__getitem__


class TinyRegressor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 8))
        self.head = nn.Linear(8, 1)
        self.register_buffer("offset", torch.full((1,), 0.25))

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> Output:
        y = self.head(torch.tanh(self.encoder(x))).squeeze(-1) + self.offset
        return Output(loss=nn.functional.mse_loss(y.float(), labels.float()), logits=y.float())


class Pairs(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 6, generator=g)
        # Targets of size ~0.3 keep gradients x 2**16 (the initial fp16 loss scale) inside fp16's
        # range also when DeepSpeed accumulates them in fp16 (see test_deepspeed_training.py).
        self.y = 0.3 * torch.sin(self.x.sum(-1)) + 0.03 * torch.randn(n, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.y[i]}


def make_objects(world: int) -> tuple[nn.Module, torch.optim.Optimizer, Any, DataLoader[Any],
                                     DataLoader[Any]]:
    torch.manual_seed(0)
    model = TinyRegressor()
    # Two param groups as real recipes use (no decay and a different lr for biases): DeepSpeed
    # must keep each group's settings, and the scheduler must move both.
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if not n.endswith("weight")]
    groups: list[dict[str, Any]] = [{"params": weights},
                                    {"params": biases, "weight_decay": 0.0, "lr": LR / 2}]
    optimizer = torch.optim.AdamW(groups, lr=LR, weight_decay=WEIGHT_DECAY)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
    train = DataLoader(Pairs(STEPS_PER_EPOCH * BATCH * world, seed=1), batch_size=BATCH, shuffle=False)
    evaluation = DataLoader(Pairs(4 * BATCH * world, seed=2), batch_size=BATCH, shuffle=False)
    return model, optimizer, scheduler, train, evaluation


def plain_reference(world: int, precision: str = "no", inject_overflow_step: int | None = None,
                    clip: float | None = None) -> dict[str, Any]:
    """The same loop in plain PyTorch on one process: global batch = the ranks' batches together
    (rank r holds the r-th block of BATCH), gradients averaged over ranks as DDP does. With
    fp16/bf16, torch.autocast (+ torch.amp.GradScaler for fp16), the amp recipe; the injected
    overflow multiplies the loss by inf at that optimizer step; `clip` clips the global L2 norm
    of the (averaged) gradients before each step. Imports nothing from accelerate_core."""
    model, optimizer, scheduler, train, evaluation = make_objects(world)
    fp16, half = precision == "fp16", precision != "no"
    dtype = torch.float16 if fp16 else torch.bfloat16
    scaler = torch.amp.GradScaler("cpu", enabled=fp16)
    data = Pairs(len(train.dataset), seed=1)  # type: ignore[arg-type]  # the same samples
    params = list(model.parameters())
    losses, overflows, steps = [], [], 0
    for _ in range(EPOCHS):
        for step in range(STEPS_PER_EPOCH):
            start = step * BATCH * world
            shard_losses = []
            for r in range(world):
                # Rank r's own backward (its gradient magnitudes decide fp16 overflow), then
                # the average over ranks that DDP's all-reduce computes.
                idx = slice(start + r * BATCH, start + (r + 1) * BATCH)
                with torch.autocast("cpu", dtype=dtype, enabled=half):
                    out = model(data.x[idx], data.y[idx])
                loss = out.loss / GAS
                if steps == inject_overflow_step:
                    loss = loss * math.inf
                grads = torch.autograd.grad(scaler.scale(loss), params)
                for p, g in zip(params, grads, strict=True):
                    p.grad = g / world if p.grad is None else p.grad + g / world
                shard_losses.append(out.loss.detach().float())
            losses.append(torch.stack(shard_losses))
            if (step + 1) % GAS == 0 or step == STEPS_PER_EPOCH - 1:
                scale = scaler.get_scale() if fp16 else 1.0
                if clip is not None:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(params, clip)
                scaler.step(optimizer)
                scaler.update()
                skipped = fp16 and scaler.get_scale() < scale
                overflows.append(skipped)
                if not skipped:
                    scheduler.step()
                optimizer.zero_grad()
                steps += 1
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=half):
        preds = torch.cat([model(b["x"], b["labels"]).logits.float() for b in evaluation])
    return {"losses": torch.stack(losses), "eval": preds, "state_dict": model.state_dict(),
            "lr": [g["lr"] for g in optimizer.param_groups], "overflows": overflows}


def mission_loop(accelerator: Any, model: Any, optimizer: Any, scheduler: Any, tr_data: Any,
                 eval_data: Any, epochs: int, inject_overflow_step: int | None = None,
                 first_epoch: int = 0, clip_in_loop: float | None = None) -> dict[str, Any]:
    """The user loop (docs/the-user-loop.md), unchanged but for recording, the optional injected
    overflow and the
    optional `accelerator.clip_grad_norm_` call before the step (as plain loops write it)."""
    losses, overflows, loss_scales, steps = [], [], [], 0
    engine_optimizer = accelerator.strategy.engine.optimizer
    for _e in range(first_epoch, epochs):
        for step, batch in enumerate(tr_data):
            output = model(**batch)
            loss = output.loss / GAS
            if inject_overflow_step is not None and steps == inject_overflow_step:
                loss = loss * math.inf  # every gradient becomes inf/nan
            accelerator.backward(loss)
            losses.append(accelerator.gather(output.loss.detach().float().reshape(1)))
            if (step + 1) % GAS == 0 or step == len(tr_data) - 1:
                if clip_in_loop is not None:
                    accelerator.clip_grad_norm_(model.parameters(), clip_in_loop)
                optimizer.step()
                optimizer.zero_grad()
                overflows.append(optimizer.is_overflow)
                loss_scales.append(float(getattr(engine_optimizer, "loss_scale", 1.0)))
                if not optimizer.is_overflow:
                    scheduler.step()
                steps += 1
    model.eval()
    preds = []
    for batch in eval_data:
        output = model(**batch)
        preds.append(accelerator.gather(output.logits.float()))
    model.train()
    accelerator.wait_for_everyone()
    return {"losses": torch.stack(losses) if losses else torch.empty(0), "eval": torch.cat(preds),
            "overflows": overflows, "loss_scales": loss_scales,
            "lr": [g["lr"] for g in optimizer.param_groups]}


def build(stage: int, mixed_precision: str, **plugin_kwargs: Any) -> tuple[Any, ...]:
    from accelerate_core import Accelerator, DeepSpeedPlugin

    plugin = DeepSpeedPlugin(zero_stage=stage, **plugin_kwargs)
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision, gradient_accumulation_steps=GAS,
                              deepspeed_plugin=plugin)
    model, optimizer, scheduler, train, evaluation = make_objects(accelerator.num_processes)
    prepared = accelerator.prepare(model, optimizer, train, evaluation, scheduler)
    return (accelerator, *prepared)


def check_train(stage: int, mixed_precision: str, out: Path, inject: int | None = None,
                clip: float | None = None, clip_in_loop: float | None = None,
                offload: bool = False) -> dict[str, Any]:
    """The user loop; the state dict is also saved, as the user loop does, to
    OUT/state_dict_zero{stage}_{precision}[_clip].pt."""
    from accelerate_core.strategies.deepspeed.accel import native_cpu_fp16_supported

    offloads = {"offload_optimizer_device": "cpu"} if offload else {}
    if offload and stage == 3:
        offloads["offload_param_device"] = "cpu"
    accelerator, model, optimizer, train, evaluation, scheduler = build(
        stage, mixed_precision, cpu_fp16_emulation=mixed_precision == "fp16", gradient_clipping=clip,
        **offloads)
    record = mission_loop(accelerator, model, optimizer, scheduler, train, evaluation, EPOCHS, inject,
                          clip_in_loop=clip_in_loop)
    # As in the user loop: every rank calls get_state_dict, the main process saves it.
    record["state_dict"] = accelerator.get_state_dict(model)
    suffix = "_clip" if clip is not None or clip_in_loop is not None else "_offload" if offload else ""
    accelerator.save(record["state_dict"], out / f"state_dict_zero{stage}_{mixed_precision}{suffix}.pt")
    record["unwrapped_type"] = type(accelerator.unwrap_model(model)).__name__
    record["emulated"] = accelerator.strategy.emulated
    record["native"] = native_cpu_fp16_supported()  # DeepSpeed's own answer, in this process
    record["world"] = accelerator.num_processes
    accelerator.free_memory()
    return record


def check_resume(stage: int, out: Path) -> dict[str, Any]:
    """Epoch 0, save_state, epoch 1 (uninterrupted) vs a fresh Accelerator that loads the state
    and runs epoch 1 (resumed)."""
    directory = out / f"ckpt_zero{stage}"
    accelerator, model, optimizer, train, evaluation, scheduler = build(stage, "no")
    mission_loop(accelerator, model, optimizer, scheduler, train, evaluation, epochs=1)
    accelerator.save_state(directory)
    uninterrupted = mission_loop(accelerator, model, optimizer, scheduler, train, evaluation,
                                 epochs=2, first_epoch=1)
    uninterrupted["state_dict"] = accelerator.get_state_dict(model)
    accelerator.free_memory()

    accelerator, model, optimizer, train, evaluation, scheduler = build(stage, "no")
    accelerator.load_state(directory)
    resumed = mission_loop(accelerator, model, optimizer, scheduler, train, evaluation,
                           epochs=2, first_epoch=1)
    resumed["state_dict"] = accelerator.get_state_dict(model)
    accelerator.free_memory()
    return {"uninterrupted": uninterrupted, "resumed": resumed}


def check_misuse(stage: int) -> dict[str, Any]:
    """get_state_dict on the main process only must raise CollectiveMisuseError, not hang; the
    next Accelerator in the same launch still works (the check's group dies with this one)."""
    from accelerate_core.errors import CollectiveMisuseError

    accelerator, model, *_ = build(stage, "no", collective_timeout_s=3.0)
    record: dict[str, Any] = {"raised": None, "message": ""}
    if accelerator.is_main_process:
        try:
            accelerator.get_state_dict(model)
        except CollectiveMisuseError as exc:
            record = {"raised": type(exc).__name__, "message": str(exc)}
    accelerator.wait_for_everyone()  # the default group is untouched by the failed check
    accelerator.free_memory()
    return record


def check_functional_linear(stage: int) -> dict[str, Any]:
    """ZeRO-3 can swap torch.nn.functional.linear for the whole process (DeepSpeed's
    memory_efficient_linear). The core keeps it off by default, and when a user config turns it
    on, puts torch's own back at teardown so later models in the process compute as before."""
    original = torch.nn.functional.linear
    accelerator, *_ = build(stage, "no")
    swapped_by_default = torch.nn.functional.linear is not original
    accelerator.free_memory()
    asked = {"zero_optimization": {"memory_efficient_linear": True}}
    accelerator, *_ = build(stage, "no", config=asked)
    swapped_when_asked = torch.nn.functional.linear is not original
    accelerator.free_memory()
    return {"swapped_by_default": swapped_by_default, "swapped_when_asked": swapped_when_asked,
            "restored_after_teardown": torch.nn.functional.linear is original}


def check_engine_counting_micro_steps(stage: int) -> dict[str, Any]:
    """DeepSpeed before 0.19.4 ignores managed_gradient_accumulation=False and applies only every
    GAS-th engine.step(): the engine's boundary is put back to those releases' formula
    (deepspeed/runtime/engine.py of 0.16.9-0.19.3), so the first step is not applied, and the core
    must say so rather than report an fp16 overflow that never happened."""
    from accelerate_core.deepspeed_support import UnsupportedDeepSpeedError

    accelerator, model, optimizer, train, *_ = build(stage, "no")
    engine = accelerator.strategy.engine
    engine.is_gradient_accumulation_boundary = (
        lambda: (engine.micro_steps + 1) % engine.gradient_accumulation_steps() == 0)
    record: dict[str, Any] = {"raised": None, "message": ""}
    batch = next(iter(train))
    accelerator.backward(model(**batch).loss / GAS)
    try:
        optimizer.step()
    except UnsupportedDeepSpeedError as exc:
        record = {"raised": type(exc).__name__, "message": str(exc)}
    accelerator.free_memory()
    return record


def check_prepare_errors() -> dict[str, Any]:
    """Wrong uses of prepare() under DeepSpeed give the explained errors, on every rank alike."""
    from accelerate_core import Accelerator, DeepSpeedPlugin
    from accelerate_core.errors import AccelerateCoreError

    def attempt(plugin: Any, prepare: Any) -> str:
        accelerator = Accelerator(cpu=True, gradient_accumulation_steps=GAS, deepspeed_plugin=plugin)
        model, optimizer, _, train, _ = make_objects(accelerator.num_processes)
        try:
            prepare(accelerator, model, optimizer, train)
            return "no error"
        except AccelerateCoreError as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            accelerator.free_memory()

    def twice(acc: Any, model: Any, optimizer: Any, train: Any) -> None:
        acc.prepare(model, optimizer, train)
        acc.prepare(TinyRegressor())

    user_config = {"train_micro_batch_size_per_gpu": 99, "optimizer": {"type": "Adam"},
                   "zero_optimization": {"stage": 1}}
    return {
        "twice": attempt(DeepSpeedPlugin(zero_stage=2), twice),
        "no_optimizer": attempt(DeepSpeedPlugin(zero_stage=2),
                                lambda acc, model, optimizer, train: acc.prepare(model, train)),
        "conflicts": attempt(DeepSpeedPlugin(zero_stage=3, config=user_config),
                             lambda acc, model, optimizer, train: acc.prepare(model, optimizer, train)),
    }


def check_fp16_refused() -> dict[str, Any]:
    """Without the opt-in, fp16 on a CPU lacking native fp16 is a specific error."""
    from accelerate_core.errors import UnsupportedPrecisionError
    from accelerate_core.strategies.deepspeed.accel import native_cpu_fp16_supported
    record: dict[str, Any] = {"native": native_cpu_fp16_supported(), "raised": None, "message": ""}
    try:
        accelerator, *_ = build(2, "fp16")
        accelerator.free_memory()
    except UnsupportedPrecisionError as exc:
        record.update(raised=type(exc).__name__, message=str(exc))
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--checks", required=True, help="comma-separated, see the module docstring")
    parser.add_argument("--inject-overflow-step", type=int, default=1)
    args = parser.parse_args(argv)
    import torch.distributed as dist

    for check in args.checks.split(","):
        kind, *params = check.split(":")
        if kind == "train":
            record = check_train(int(params[0]), params[1], args.out)
        elif kind == "fp16":
            record = check_train(int(params[0]), "fp16", args.out, inject=args.inject_overflow_step)
        elif kind == "clip":  # DeepSpeedPlugin(gradient_clipping=CLIP): the engine clips in step()
            record = check_train(int(params[0]), "no", args.out, clip=CLIP)
        elif kind == "clipcall":  # accelerator.clip_grad_norm_(params, CLIP) in the loop instead
            record = check_train(int(params[0]), "no", args.out, clip_in_loop=CLIP)
        elif kind == "offload":  # optimizer (and for ZeRO-3 parameter) offload to CPU memory
            record = check_train(int(params[0]), "no", args.out, offload=True)
        elif kind == "resume":
            record = check_resume(int(params[0]), args.out)
        elif kind == "misuse":
            record = check_misuse(int(params[0]))
        elif kind == "linear":
            record = check_functional_linear(int(params[0]))
        elif kind == "micro_steps":
            record = check_engine_counting_micro_steps(int(params[0]))
        elif kind == "prepare_errors":
            record = check_prepare_errors()
        elif kind == "fp16_refused":
            record = check_fp16_refused()
        else:
            raise SystemExit(f"unknown check {check!r}")
        if not dist.is_initialized() or dist.get_rank() == 0:
            torch.save(copy.deepcopy(record), args.out / f"{check.replace(':', '_')}.pt")
        # What survived this check lives as long as the launch: left out of the next checks'
        # gc.collect() calls (free_memory, teardown), which otherwise walk all of torch and
        # deepspeed each time (harness/rank/worker.py says more).
        gc.collect()
        gc.freeze()


if __name__ == "__main__":
    main()
