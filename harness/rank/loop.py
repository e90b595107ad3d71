"""A task trained through an implementation of the Accelerator API (accelerate_core by default):
the user loop, run on every rank of a launch.

What it records mirrors harness.golden.reference exactly (same loop, same quantities), so a record and
a golden differ only by what the backend did: the per-step loss is the global mean
(accelerator.reduce), eval outputs are gathered without the padding of the last uneven batch
(gather_for_metrics), the final state dict is the consolidated one (get_state_dict, a collective
called on every rank) as accelerator.save wrote it to a file (harness.rank.saved_weights).
Everything else the record holds (learning rates, skipped steps, loss scales, the evidence of what
ran) is the rank's recorder's (harness.rank.recorder), an observer the Accelerator tells of each
step: the loop below is the user loop of docs/the-user-loop.md.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from harness.implementations import adapter_for
from harness.implementations.base import Adapter, CellSettings
from harness.plan.cell import CORE
from harness.rank.gather_check import PAD_INDEX, EvalPair, GatherCheck, ragged_width
from harness.rank.phases import PhaseTimer
from harness.rank.recorder import RankRecorder
from harness.rank.resume_point import RunSpan
from harness.rank.saved_weights import saved_and_read_back
from harness.record.record_format import Fingerprint, Record
from harness.tasks.base import Task
from harness.tasks.loader_options import training_loader_options


def train_task(task: Task, *, precision: str, cpu: bool, zero_stage: int | None,
               cpu_fp16_emulation: bool = False, span: RunSpan | None = None,
               timer: PhaseTimer | None = None, fsdp: bool = False,
               implementation: str = CORE) -> Record | None:
    """Train `task` (the part of its run `span` says: harness.rank.resume_point) through
    `implementation` (harness.implementations: the core by default); return the Record on the
    main process, None on the others. `timer` hears where the time went (--profile). `fsdp`:
    shard with FSDP2; the user loop below is the same for every backend and implementation."""
    timer = timer or PhaseTimer()
    span = span or RunSpan()
    torch.manual_seed(task.seed)  # a clean RNG per cell, even when cells share a process
    adapter = adapter_for(implementation)
    recorder = RankRecorder(task, span, adapter)
    settings = CellSettings(precision=precision, cpu=cpu, zero_stage=zero_stage, fsdp=fsdp,
                            cpu_fp16_emulation=cpu_fp16_emulation)
    accelerator = adapter.build(task, settings, [recorder])
    try:
        return _run(accelerator, task, precision, span, timer, recorder, adapter)
    finally:
        recorder.close()  # its hooks and wrapped collectives go, however the cell ended
        adapter.free(accelerator)
        timer.lap("teardown")


def _run(accelerator: Any, task: Task, precision: str, span: RunSpan,
         timer: PhaseTimer, recorder: RankRecorder, adapter: Adapter) -> Record | None:
    processes = accelerator.num_processes
    model = built = task.build_model()
    raw_optimizer = task.build_optimizer(model)
    lr_scheduler = task.build_scheduler(raw_optimizer)
    train = DataLoader(task.train_dataset(), batch_size=task.per_process_batch_size(processes),
                       **training_loader_options(task))
    evaluation = DataLoader(task.eval_dataset(), batch_size=task.eval_batch_size // processes)
    # A checkpointed run prepares its scheduler too, so that save_state / load_state carry it.
    extra = (lr_scheduler,) if span.checkpointed else ()
    model, optimizer, tr_data, eval_data, *prepared = accelerator.prepare(
        model, raw_optimizer, train, evaluation, *extra)
    lr_scheduler = prepared[0] if prepared else lr_scheduler
    first_epoch = span.restore(accelerator, tr_data)  # load_state for a resume destination
    accumulation = task.gradient_accumulation_steps
    timer.lap("setup")  # the Accelerator, prepare (the process group, deepspeed.initialize), restore

    losses: list[float] = []
    opt_step = span.first_step
    model.train()
    for epoch in range(first_epoch, task.epochs):
        for step, batch in span.batches(accelerator, tr_data, epoch, first_epoch):
            output = model(**batch)
            losses.append(float(accelerator.reduce(output.loss.detach().float(), "mean")))
            boundary = (step + 1) % accumulation == 0 or step == len(tr_data) - 1
            loss = output.loss / accumulation
            if boundary and task.injects_overflow(precision, opt_step):
                loss = loss * float("inf")  # as in the reference: this step must be skipped
            accelerator.backward(loss)
            if not boundary:
                continue
            if task.max_grad_norm is not None:
                accelerator.clip_grad_norm_(model.parameters(), task.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
            if not optimizer.is_overflow:  # fp16 loss scaling skipped this step
                lr_scheduler.step()
            opt_step += 1
            if span.stop_and_save(accelerator, opt_step):  # a resume source saves and stops
                break
        if span.stopped:
            break

    timer.lap("training")
    evidence = recorder.evidence(accelerator, model, built)  # before teardown: the engine is still there

    model.eval()
    logits, labels = [], []
    gathers = GatherCheck(processes)
    with torch.no_grad(), recorder.watching_evaluation(model, evidence):
        for batch in [] if span.stopped else eval_data:  # a source stops at its checkpoint
            output = model(**batch)
            logits.append(accelerator.gather_for_metrics(output.logits).cpu())
            labels.append(accelerator.gather_for_metrics(batch["labels"]).cpu())
            # the user loop's gather of the whole output (a model output is a mapping)
            given = {"logits": output.logits, **({"loss": output.loss} if output.loss is not None else {})}
            # and the Hugging Face examples' gather of (predictions, references) as one tuple
            pair = accelerator.gather_for_metrics((output.logits, batch["labels"]))
            # the output object itself (a dataclass) and the pair as a namedtuple: rebuilt as given
            structures = (output, accelerator.gather(output) if adapter.gathers_dataclasses else None,
                          accelerator.gather_for_metrics(EvalPair(output.logits, batch["labels"])))
            # a generation loop's pattern: outputs of another length on each process, padded to one
            flat = output.logits.reshape(output.logits.shape[0], -1)
            ragged = flat[:, :ragged_width(accelerator.process_index)]
            padded = accelerator.gather(accelerator.pad_across_processes(ragged, dim=1, pad_index=PAD_INDEX))
            gathers.add(accelerator.gather(given), set(given), output.logits.shape[0], logits[-1], pair,
                        labels[-1], structures, padded)
    evidence["gather"] = gathers.evidence()
    accelerator.wait_for_everyone()
    # every rank: a collective under ZeRO-3; then saved and read back, as the user loop keeps it
    state_dict = {} if span.stopped else saved_and_read_back(accelerator, accelerator.get_state_dict(model))
    timer.lap("evaluation")  # evidence, the gathered eval outputs, the consolidated state dict, saved
    if not accelerator.is_main_process:
        return None
    ran_as, emulated = adapter.ran_as(accelerator)
    return Record(
        task=task.name,
        precision=precision,
        losses=losses,
        lrs=recorder.lrs,
        skipped_steps=recorder.skipped_steps,
        loss_scales=recorder.loss_scales,
        eval_outputs={"logits": torch.cat(logits), "labels": torch.cat(labels)} if logits else {},
        state_dict=state_dict,
        meta={"evidence": evidence},
        fingerprint=Fingerprint.here(
            device=accelerator.device.type, world_size=processes, seed=task.seed, precision=precision,
            strategy=ran_as, emulated=emulated,
        ),
    )
