"""The MISSION loop as a user script: `Accelerator()` with no arguments, so every setting comes
from `accelerate-core launch` (through the environment). Rank 0 writes what the run produced,
and what the Accelerator resolved, to the file named by argv[1]."""

from __future__ import annotations

import sys

import torch
from mission_parts import BATCH_PER_RANK, EPOCHS, GRADIENT_ACCUMULATION_STEPS, build

from accelerate_core import Accelerator

out_path = sys.argv[1]
accelerator = Accelerator()
model, optimizer, lr_scheduler, tr_data_raw, eval_data_raw = build(BATCH_PER_RANK)
model, optimizer, tr_data, eval_data = accelerator.prepare(model, optimizer, tr_data_raw, eval_data_raw)

for _ in range(EPOCHS):
    for step, batch in enumerate(tr_data):
        output = model(**batch)
        loss = output.loss / GRADIENT_ACCUMULATION_STEPS
        accelerator.backward(loss)
        if (step + 1) % GRADIENT_ACCUMULATION_STEPS == 0 or step == len(tr_data) - 1:
            optimizer.step()
            optimizer.zero_grad()
            if not optimizer.is_overflow:
                lr_scheduler.step()

model.eval()
predictions, labels = [], []
with torch.no_grad():
    for batch in eval_data:
        output = model(**batch)
        predictions.append(accelerator.gather(output.logits))
        labels.append(accelerator.gather(batch["labels"]))

accelerator.wait_for_everyone()
state_dict = accelerator.get_state_dict(model)
accelerator.save(
    {
        "state_dict": state_dict,
        "predictions": torch.cat(predictions).cpu(),
        "labels": torch.cat(labels).cpu(),
        "num_processes": accelerator.num_processes,
        "backend": accelerator.settings.backend,
        "strategy": accelerator.settings.strategy_name,
        "mixed_precision": accelerator.mixed_precision,
        "device": str(accelerator.device),
    },
    out_path,
)
