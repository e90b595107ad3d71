"""The user loop (the user loop of docs/the-user-loop.md) over a given Accelerator; rank 0 writes what the run
produced, and what the Accelerator resolved, to `out_path`. Shared by the user scripts that
`accelerate-core launch` starts (mission_noargs.py, mission_fp16.py), which differ only in how
they build their Accelerator."""

from __future__ import annotations

import torch
from mission_parts import BATCH_PER_RANK, EPOCHS, GRADIENT_ACCUMULATION_STEPS, build

from accelerate_core import Accelerator


def run(accelerator: Accelerator, out_path: str) -> None:
    model, optimizer, lr_scheduler, tr_data_raw, eval_data_raw = build(BATCH_PER_RANK)
    model, optimizer, tr_data, eval_data = accelerator.prepare(model, optimizer, tr_data_raw, eval_data_raw)
    skipped = 0
    for _ in range(EPOCHS):
        for step, batch in enumerate(tr_data):
            output = model(**batch)
            loss = output.loss / GRADIENT_ACCUMULATION_STEPS
            accelerator.backward(loss)
            if (step + 1) % GRADIENT_ACCUMULATION_STEPS == 0 or step == len(tr_data) - 1:
                optimizer.step()
                optimizer.zero_grad()
                if not optimizer.is_overflow:  # fp16 loss scaling skipped this step
                    lr_scheduler.step()
                else:
                    skipped += 1

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
            "gradient_accumulation_steps": accelerator.settings.gradient_accumulation_steps,
            "device": str(accelerator.device),
            "skipped_steps": skipped,
        },
        out_path,
    )
