"""The same training as mission_loop.py in plain single-process PyTorch (nothing from the core).

One process trains on the global batches the N ranks would see together: each epoch's order is the
one a plain `DataLoader(shuffle=True, generator=torch.Generator().manual_seed(SHUFFLE_SEED))`
gives in that pass (torch's own draws: nothing here knows how the core shards), and a short last
global batch is filled by wrapping to the start of that order (the documented sharding rule).
fp16 uses torch.autocast + torch.amp.GradScaler, bf16 autocast only.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.utils.data import DataLoader

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

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def epoch_order(num_samples: int, global_batch: int, epoch: int) -> list[int]:
    """The sample order of pass `epoch` of the plain shuffling DataLoader mission_loop.py builds."""
    loader = DataLoader(range(num_samples), batch_size=global_batch, shuffle=True,
                        generator=torch.Generator().manual_seed(SHUFFLE_SEED))
    passes = [[int(i) for batch in loader for i in batch] for _ in range(epoch + 1)]
    return passes[epoch]


def global_batches(num_samples: int, global_batch: int, epoch: int) -> list[list[int]]:
    order = epoch_order(num_samples, global_batch, epoch)
    batches = []
    for start in range(0, num_samples, global_batch):
        batch = order[start:start + global_batch]
        while len(batch) < global_batch:
            batch += order[: global_batch - len(batch)]
        batches.append(batch)
    return batches


def train_reference(config: TaskConfig) -> dict[str, Any]:
    """Train and return the record mission_loop.py writes (same keys), plus `state_dict`."""
    model = make_model()
    optimizer = make_optimizer(model, config)
    scheduler = make_scheduler(optimizer)
    train = SyntheticClassification(config.train_samples, TRAIN_DATA_SEED)
    dtype = _DTYPES.get(config.mixed_precision)
    autocast = (lambda: torch.autocast("cpu", dtype=dtype)) if dtype else contextlib.nullcontext
    scaler = torch.amp.GradScaler("cpu") if config.mixed_precision == "fp16" else None
    gas = config.gradient_accumulation_steps
    record: dict[str, Any] = {"losses": [], "skipped": [], "lrs": [], "loss_scales": []}
    opt_step = 0
    for epoch in range(config.epochs):
        batches = global_batches(len(train), config.world_size * config.batch_size, epoch)
        for step, indices in enumerate(batches):
            x, labels = train.x[indices], train.labels[indices]
            with autocast():
                logits = model.net(x)
            batch_loss = torch.nn.functional.cross_entropy(logits.float(), labels)
            loss = batch_loss / gas
            boundary = (step + 1) % gas == 0 or step == len(batches) - 1
            if boundary and opt_step == config.inject_overflow_step:
                loss = loss * float("inf")
            record["losses"].append(batch_loss.item())
            (scaler.scale(loss) if scaler else loss).backward()
            if boundary:
                skipped = False
                if scaler is not None:
                    before = scaler.get_scale()
                    scaler.step(optimizer)
                    scaler.update()
                    skipped = scaler.get_scale() < before
                else:
                    optimizer.step()
                optimizer.zero_grad()
                if not skipped:
                    scheduler.step()
                record["skipped"].append(skipped)
                record["lrs"].append(optimizer.param_groups[0]["lr"])
                record["loss_scales"].append(scaler.get_scale() if scaler else None)
                opt_step += 1
    evaluation = SyntheticClassification(config.eval_samples, EVAL_DATA_SEED)
    model.eval()
    with torch.no_grad(), autocast():
        record["metric_predictions"] = model.net(evaluation.x).float()
    record["metric_labels"] = evaluation.labels.float()
    record["state_dict"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return record
