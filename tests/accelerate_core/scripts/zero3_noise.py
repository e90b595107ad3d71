"""A few ZeRO-3 steps through `Accelerator()` (the launcher decides backend and precision) that
warn and print on every step, for the test that DeepSpeed's known noise shows once and the
user's own output does not go with it. Started by `accelerate-core launch`.

Each step, on every rank: a UserWarning and a FutureWarning of the script's own (messages the
user can act on), and a line on stdout.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accelerate_core import Accelerator

STEPS = 6


def own_warnings(step: int) -> None:
    warnings.warn(f"user warning from the script, step {step}", UserWarning, stacklevel=1)
    warnings.warn("the script's own deprecated call", FutureWarning, stacklevel=1)


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = DataLoader(TensorDataset(torch.randn(8 * STEPS, 8), torch.randn(8 * STEPS, 2)), batch_size=4)
    accelerator = Accelerator()
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    for step, (inputs, targets) in enumerate(data):
        if step == STEPS:
            break
        loss = nn.functional.mse_loss(model(inputs).float(), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        own_warnings(step)
        print(f"rank {accelerator.process_index} step {step} done", flush=True)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
