"""The dtype a cell's model outputs must come back in, where the backend's precision semantics
differ from the plain reference's.

The goldens follow autocast: the model's parameters stay fp32 and each op picks its dtype, so an
output made by a final fp32 op (a scale, a sum) is fp32 in the golden. DeepSpeed's fp16 and bf16
modes keep the whole model in the half dtype (its documented semantics), so every floating output
of such a cell is half: that is the dtype to demand there. Demanding it, rather than ignoring the
difference, keeps the check sharp: a DeepSpeed bf16 cell whose outputs came back fp32 ran fp32.
FSDP2 under a half policy computes every layer in the half dtype too, but the core gives the
root unit `output_dtype=float32` (accelerate_core/precision/fsdp.py, docs/fsdp.md), so its
outputs come back fp32 whatever the golden's last op made: that is the dtype to demand there (an
fsdp bf16 cell whose logits came back bf16 did not run the core's policy).
The state dict a backend hands out is always compared in the golden's dtype (fp32).
"""

from __future__ import annotations

import torch

from harness.plan.cell import Cell

HALF_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# The eval quantities the model computes (harness.rank.loop gathers `output.logits`); the others
# (`labels`) come from the data and keep the golden's dtype on every backend.
MODEL_OUTPUTS = frozenset({"logits"})


def expected_output_dtype(cell: Cell) -> torch.dtype | None:
    """The dtype of the model's floating eval outputs (MODEL_OUTPUTS) in `cell`; None: the
    golden's own."""
    if cell.is_deepspeed and cell.precision in HALF_DTYPES:
        return HALF_DTYPES[cell.precision]
    if cell.is_fsdp and cell.precision in HALF_DTYPES:
        return torch.float32  # the root unit's output_dtype
    return None
