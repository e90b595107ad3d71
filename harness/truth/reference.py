"""The golden baseline: a task trained in plain PyTorch, in one process, over whole global batches.

It imports nothing from accelerate_core on purpose: a baseline made by the code under test would
prove nothing. fp16 runs through `torch.autocast` + `torch.amp.GradScaler` (with the task's
injected overflow), bf16 through `torch.autocast`, fp32 as is. The loop is the user loop, with
the loss divided by the accumulation steps and a short last accumulation at the end of an epoch,
and, for a task with `max_grad_norm`, torch.nn.utils.clip_grad_norm_ on the unscaled gradients
before each optimizer step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader

from harness.spec.cell import PRECISIONS
from harness.tasks.base import DictDataset, Task
from harness.truth.global_rng import GLOBAL_RNG_LOCK
from harness.truth.record import Fingerprint, Record

_AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class ReferenceInputs:
    """A task's initial weights and data, made elsewhere: the goldens' deterministic mode trains
    with portable kernels, which would draw other initial weights and data than the cells'
    kernels do, so the process that makes goldens is handed the ones the cells start from."""

    initial_state: dict[str, torch.Tensor]
    train: dict[str, torch.Tensor]
    eval: dict[str, torch.Tensor]

    @classmethod
    def of(cls, task: Task) -> ReferenceInputs:
        with GLOBAL_RNG_LOCK:
            initial_state = task.build_model().state_dict()
        return cls(initial_state=initial_state, train=task.train_dataset().tensors,
                   eval=task.eval_dataset().tensors)


@dataclass(frozen=True)
class ReferenceState:
    """The reference's training state right after an optimizer step: what a checkpoint writer
    (harness.truth.reference_checkpoint) saves."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler | None
    epoch: int  # the epoch being iterated
    batches_consumed: int  # batches of that epoch taken so far
    optimizer_steps: int  # taken so far over the run


# Stop after that many optimizer steps, handing the state to the callable (a checkpoint writer);
# the Record then holds the losses, lrs, skips and loss scales so far, no eval, no weights.
StopAt = tuple[int, Callable[[ReferenceState], None]]


def train_reference(task: Task, precision: str, device: str = "cpu",
                    inputs: ReferenceInputs | None = None, stop_at: StopAt | None = None) -> Record:
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision {precision!r}: not a reference precision. Valid: {PRECISIONS}. "
            "Fix: pass one of them"
        )
    with GLOBAL_RNG_LOCK, _single_thread(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(task.seed)
        return _train(task, precision, torch.device(device), inputs or ReferenceInputs.of(task), stop_at)


def _train(task: Task, precision: str, device: torch.device, inputs: ReferenceInputs,
           stop_at: StopAt | None = None) -> Record:
    model = task.build_model()
    model.load_state_dict(inputs.initial_state)
    model = model.to(device)
    optimizer = task.build_optimizer(model)
    scheduler = task.build_scheduler(optimizer)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    train = DataLoader(DictDataset(inputs.train), batch_size=task.global_batch_size, shuffle=False)
    losses: list[float] = []
    lrs: list[list[float]] = []
    skipped: list[int] = []
    scales: list[float] = []
    opt_step = 0
    model.train()
    for _epoch in range(task.epochs):
        for step, batch in enumerate(train):
            with _autocast(device, precision):
                output = model(**_to(batch, device))
            losses.append(output.loss.item())
            boundary = task.is_accumulation_boundary(step)
            loss = output.loss / task.gradient_accumulation_steps
            if boundary and task.injects_overflow(precision, opt_step):
                loss = loss * float("inf")  # every gradient becomes inf/nan: the step must be skipped
            (scaler.scale(loss) if scaler is not None else loss).backward()
            if not boundary:
                continue
            if task.max_grad_norm is not None:
                # As accelerator.clip_grad_norm_ does: unscale first (fp16), then clip the norm.
                if scaler is not None:
                    scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), task.max_grad_norm)
            lrs.append([group["lr"] for group in optimizer.param_groups])
            overflow = False
            if scaler is not None:
                scale_before = scaler.get_scale()
                scaler.step(optimizer)
                scaler.update()
                # GradScaler lowers its scale exactly when it found inf/nan and skipped the step.
                overflow = scaler.get_scale() < scale_before
                scales.append(scaler.get_scale())
            else:
                optimizer.step()
            optimizer.zero_grad()
            if overflow:
                skipped.append(opt_step)
            else:
                scheduler.step()
            opt_step += 1
            if stop_at is not None and opt_step == stop_at[0]:
                stop_at[1](ReferenceState(model, optimizer, scheduler, scaler, _epoch, step + 1, opt_step))
                break
        if stop_at is not None and opt_step == stop_at[0]:
            break
    stopped = stop_at is not None and opt_step == stop_at[0]
    model.eval()
    eval_outputs = {} if stopped else _evaluate(task, model, device, precision, DictDataset(inputs.eval))
    return Record(
        task=task.name,
        precision=precision,
        losses=losses,
        lrs=lrs,
        skipped_steps=skipped,
        loss_scales=scales,
        eval_outputs=eval_outputs,
        state_dict={} if stopped else model.state_dict(),
        fingerprint=Fingerprint.here(device=device.type, world_size=1, seed=task.seed,
                                     precision=precision, strategy="reference"),
    )


@torch.no_grad()
def _evaluate(task: Task, model: torch.nn.Module, device: torch.device, precision: str,
              dataset: DictDataset) -> dict[str, torch.Tensor]:
    logits, labels = [], []
    for batch in DataLoader(dataset, batch_size=task.eval_batch_size, shuffle=False):
        with _autocast(device, precision):
            output = model(**_to(batch, device))
        logits.append(output.logits)
        labels.append(batch["labels"])
    return {"logits": torch.cat(logits), "labels": torch.cat(labels)}


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


def _autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[object]:
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=_AUTOCAST_DTYPES[precision])


@contextlib.contextmanager
def _single_thread() -> Iterator[None]:
    """One intra-op thread while the baseline trains: the golden must not depend on how many
    cores the machine that regenerates it has (threaded reductions may sum in another order)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
