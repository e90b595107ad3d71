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
from dataclasses import dataclass, field

import torch
from torch.utils.data import DataLoader

from harness.golden.backend_clipping import clip_gradients
from harness.golden.exact_accumulation import ExactAccumulation
from harness.golden.global_rng import GLOBAL_RNG_LOCK
from harness.golden.half_weights import HalfWeights
from harness.golden.rank_rows import linear_rows_per_rank
from harness.plan.cell import PRECISIONS
from harness.record.record_format import Fingerprint, Record
from harness.tasks.base import DictDataset, Task
from harness.tasks.loader_options import training_loader_options

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
    (harness.golden.reference_checkpoint) saves."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler | None
    epoch: int  # the epoch being iterated
    batches_consumed: int  # batches of that epoch taken so far
    optimizer_steps: int  # taken so far over the run


@dataclass(frozen=True)
class Perturbation:
    """What `harness calibrate` changes in the reference loop; the default changes nothing (a
    golden). Each benign field imitates a legitimate source of other bits in a cell; the gradient
    scale is a bug of known size, for detection thresholds (harness.calibrate)."""

    splits: int = 1  # each global batch as this many equal micro-batches, gradients averaged (ranks)
    # With splits: the batch whole through the model, each Linear computing each rank's rows apart,
    # so BatchNorm normalises over the global batch as SyncBatchNorm does (harness.golden.rank_rows)
    sync_batchnorm: bool = False
    threads: int = 1  # intra-op threads: reductions may sum in another order
    # fp16/bf16: the model itself in half with fp32 masters, as ZeRO-1 ("zero1"), ZeRO-2/3
    # ("zero2") or FSDP2 ("fsdp") does it (harness.golden.half_weights); "" = autocast over fp32
    # weights, as the golden
    half_weights: str = ""
    gradient_scale: float = 1.0  # every gradient times this before each optimizer step (a bug)
    # Every half-precision GEMM accumulated exactly and rounded once (harness.golden.
    # exact_accumulation): how far another kernel's accumulation order can move the run
    exact_accumulation: bool = False
    # Clip the gradient norm as DeepSpeed's ZeRO-1/2 ("zero12"), ZeRO-3 ("zero3") or FSDP2 ("fsdp")
    # computes it over sharded gradients (harness.golden.backend_clipping); "" = torch.nn.utils.
    # clip_grad_norm_ over whole gradients, as the golden
    clip_style: str = ""
    name: str = field(default="golden", compare=False)

    @property
    def rows_per_rank(self) -> bool:
        """The whole batch at once, each Linear splitting its rows by rank (sync_batchnorm)."""
        return self.sync_batchnorm and self.splits > 1


NO_PERTURBATION = Perturbation()


# Stop after that many optimizer steps, handing the state to the callable (a checkpoint writer);
# the Record then holds the losses, lrs, skips and loss scales so far, no eval, no weights.
StopAt = tuple[int, Callable[[ReferenceState], None]]


def train_reference(task: Task, precision: str, device: str = "cpu",
                    inputs: ReferenceInputs | None = None, stop_at: StopAt | None = None,
                    perturbation: Perturbation = NO_PERTURBATION) -> Record:
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision {precision!r}: not a reference precision. Valid: {PRECISIONS}. "
            "Fix: pass one of them"
        )
    with (GLOBAL_RNG_LOCK, _threads(perturbation.threads), torch.random.fork_rng(devices=[]),
          ExactAccumulation() if perturbation.exact_accumulation else contextlib.nullcontext()):
        torch.manual_seed(task.seed)
        return _train(task, precision, torch.device(device), inputs or ReferenceInputs.of(task), stop_at,
                      perturbation)


def _train(task: Task, precision: str, device: torch.device, inputs: ReferenceInputs,
           stop_at: StopAt | None = None, perturbation: Perturbation = NO_PERTURBATION) -> Record:
    model = task.build_model()
    model.load_state_dict(inputs.initial_state)
    model = model.to(device)
    parts = 1 if perturbation.rows_per_rank else perturbation.splits  # micro-batches a step's batch runs as
    half = (HalfWeights(model, _AUTOCAST_DTYPES[precision], perturbation.half_weights, parts)
            if perturbation.half_weights and precision in _AUTOCAST_DTYPES else None)
    net = half.model if half is not None else model  # what computes; `model` is what steps
    optimizer = task.build_optimizer(model)
    scheduler = task.build_scheduler(optimizer)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    # Iterated once per epoch: a shuffling task's loader draws each epoch's order as torch does.
    train = DataLoader(DictDataset(inputs.train), batch_size=task.global_batch_size,
                       **training_loader_options(task))
    losses: list[float] = []
    lrs: list[list[float]] = []
    skipped: list[int] = []
    scales: list[float] = []
    opt_step = 0
    net.train()
    for _epoch in range(task.epochs):
        for step, batch in enumerate(train):
            boundary = task.is_accumulation_boundary(step)
            step_losses = []
            for chunk in _chunks(batch, parts):
                inputs_now = _to(chunk, device) if half is None else half.cast_inputs(_to(chunk, device))
                with (_autocast(device, precision if half is None or half.autocast else "fp32",
                                cache=not perturbation.rows_per_rank), _ranks_rows(net, perturbation)):
                    output = net(**inputs_now)
                step_losses.append(output.loss.item())
                loss = output.loss / task.gradient_accumulation_steps if half is None else (
                    output.loss.float() / task.gradient_accumulation_steps)
                if perturbation.splits > 1 and not perturbation.rows_per_rank:
                    loss = loss / perturbation.splits  # the mean over ranks of each rank's gradient
                if boundary and task.injects_overflow(precision, opt_step):
                    loss = loss * float("inf")  # every gradient becomes inf/nan: the step must be skipped
                (scaler.scale(loss) if scaler is not None else loss).backward()
                if half is not None:
                    half.after_rank_backward()  # reduced and accumulated as the backend does
            # One process: its loss; split: the mean of the parts' losses, as reduce(mean) gives it
            # (an fp32 all-reduce sum divided in fp32 by the world size).
            losses.append(step_losses[0] if len(step_losses) == 1 else
                          float(torch.tensor(step_losses, dtype=torch.float32).sum() / len(step_losses)))
            if not boundary:
                continue
            if half is not None:
                half.at_boundary()
            if perturbation.gradient_scale != 1.0:
                _scale_gradients(model, perturbation.gradient_scale)
            if task.max_grad_norm is not None:
                # As accelerator.clip_grad_norm_ does: unscale first (fp16), then clip the norm.
                if scaler is not None:
                    scaler.unscale_(optimizer)
                clip_gradients(list(model.parameters()), task.max_grad_norm, perturbation.clip_style,
                               perturbation.splits)
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
            if half is not None:
                half.master_to_model()
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
    if half is not None:
        half.buffers_to_master()
    net.eval()
    eval_outputs = {} if stopped else _evaluate(task, net, device, precision, DictDataset(inputs.eval), half,
                                                perturbation.splits)
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
              dataset: DictDataset, half: HalfWeights | None = None,
              splits: int = 1) -> dict[str, torch.Tensor]:
    logits, labels = [], []
    for batch in DataLoader(dataset, batch_size=task.eval_batch_size, shuffle=False):
        # Split: each rank's block of the eval batch through the model apart, as the ranks compute
        # them (a GEMM's rounding may depend on how many rows it multiplies), the gathered rows kept.
        outputs = [_eval_forward(model, device, precision, half, part)
                   for part in _chunks(_padded(batch, dataset, task.eval_batch_size, splits), splits)]
        logits.append(torch.cat(outputs)[:len(batch["labels"])])
        labels.append(batch["labels"])
    return {"logits": torch.cat(logits), "labels": torch.cat(labels)}


def _eval_forward(model: torch.nn.Module, device: torch.device, precision: str, half: HalfWeights | None,
                  batch: dict[str, torch.Tensor]) -> torch.Tensor:
    inputs = _to(batch, device) if half is None else half.cast_inputs(_to(batch, device))
    with _autocast(device, precision if half is None or half.autocast else "fp32"):
        output = model(**inputs)
    # FSDP2's root unit hands its outputs back in fp32 (the core's output_dtype): so does its variant
    return output.logits.float() if half is not None and half.style == "fsdp" else output.logits


def _padded(batch: dict[str, torch.Tensor], dataset: DictDataset, size: int,
            splits: int) -> dict[str, torch.Tensor]:
    """A short last eval batch filled up to `size` from the start of the dataset, as the core keeps
    several ranks even (accelerate_core/data.py; gather_for_metrics drops the filling); one split
    (the golden) keeps it short, as a plain DataLoader gives it."""
    missing = size - len(batch["labels"])
    if splits == 1 or missing <= 0:
        return batch
    filling = [i % len(dataset) for i in range(missing)]
    return {k: torch.cat([v, dataset.tensors[k][filling]]) for k, v in batch.items()}


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


def _autocast(device: torch.device, precision: str,
              cache: bool = True) -> contextlib.AbstractContextManager[object]:
    if precision == "fp32":
        return contextlib.nullcontext()
    if cache:  # torch's default, as the golden always ran
        return torch.autocast(device.type, dtype=_AUTOCAST_DTYPES[precision])
    return torch.autocast(device.type, dtype=_AUTOCAST_DTYPES[precision], cache_enabled=False)


def _ranks_rows(model: torch.nn.Module,
                perturbation: Perturbation) -> contextlib.AbstractContextManager[None]:
    if not perturbation.rows_per_rank:
        return contextlib.nullcontext()
    return linear_rows_per_rank(model, perturbation.splits)


def _chunks(batch: dict[str, torch.Tensor], parts: int) -> list[dict[str, torch.Tensor]]:
    """The global batch as `parts` consecutive micro-batches: the ranks' shares (data.py's order)."""
    if parts == 1:
        return [batch]
    return [dict(zip(batch, values, strict=True))
            for values in zip(*(v.chunk(parts) for v in batch.values()), strict=True)]


def _scale_gradients(model: torch.nn.Module, factor: float) -> None:
    with torch.no_grad():
        for param in model.parameters():
            if param.grad is not None:
                param.grad.mul_(factor)


@contextlib.contextmanager
def _threads(count: int) -> Iterator[None]:
    """One intra-op thread while the baseline trains (calibration may ask for more): the golden
    must not depend on how many cores the machine that regenerates it has (threaded reductions
    may sum in another order)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
