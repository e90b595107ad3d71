"""The task of the checkpoint tests: plain torch only, so a process that never imports
accelerate_core can build the same model and load what the core saved.

AdamW over two param groups + a warm-up LambdaLR + gradient accumulation 2, a shuffled loader
whose last accumulation of an epoch is short, and a buffer. `user_loop` is the user loop
(docs/the-user-loop.md) plus a checkpoint at optimizer step SAVE_AT and a resume branch; it takes
the accelerator as an argument, so this module itself imports nothing from the core.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

GLOBAL_BATCH = 8  # per-process batch = GLOBAL_BATCH / processes: the same samples per step
SAMPLES = 40  # 5 global batches per epoch; accumulation 2 -> optimizer steps after batches 2, 4, 5
GAS = 2
EPOCHS = 3
SAVE_AT = 4  # optimizer steps: the 2nd batch of epoch 1, so the checkpoint falls mid-epoch
SHUFFLE_SEED = 1234  # torch's global seed when the loader is prepared (its shuffle seed comes from it)
LR = 2e-2


class Output(dict):  # what a HF-style model returns: attribute access to .loss
    __getattr__ = dict.__getitem__


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 8))
        self.head = nn.Linear(8, 1)
        self.register_buffer("offset", torch.full((1,), 0.25))

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> Output:
        y = self.head(torch.tanh(self.encoder(x))).squeeze(-1) + self.offset
        return Output(loss=nn.functional.mse_loss(y.float(), labels.float()), logits=y.float())


class Pairs(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int = SAMPLES, seed: int = 1) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 6, generator=g)
        self.y = 0.3 * torch.sin(self.x.sum(-1)) + 0.03 * torch.randn(n, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.y[i]}


def micro_steps_before_checkpoint() -> int:
    """Micro steps the uninterrupted run took up to the checkpoint (the loop's own rule: a step
    after every GAS micro-batches and after an epoch's last one)."""
    per_epoch = -(-SAMPLES // GLOBAL_BATCH)
    micro, steps = 0, 0
    while steps < SAVE_AT:
        step = micro % per_epoch
        micro += 1
        if (step + 1) % GAS == 0 or step == per_epoch - 1:
            steps += 1
    return micro


def make_objects(processes: int) -> tuple[Net, torch.optim.Optimizer, Any, DataLoader[Any]]:
    torch.manual_seed(0)
    model = Net()
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if not n.endswith("weight")]
    optimizer = torch.optim.AdamW(
        [{"params": weights}, {"params": biases, "weight_decay": 0.0, "lr": LR / 2}], lr=LR, weight_decay=0.01
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 3))
    # No generator: each pass draws its order from the global random stream, so a resumed run gets
    # the interrupted epoch's order back only from the checkpoint (the tests seed the global
    # stream differently on purpose).
    loader = DataLoader(Pairs(), batch_size=GLOBAL_BATCH // processes, shuffle=True)
    return model, optimizer, scheduler, loader


def prepare(accelerator: Any, shuffle_seed: int = SHUFFLE_SEED) -> tuple[Any, ...]:
    model, optimizer, scheduler, loader = make_objects(accelerator.num_processes)
    torch.manual_seed(shuffle_seed)
    return accelerator.prepare(model, optimizer, loader, scheduler)


def user_loop(
    accelerator: Any,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    loader: Any,
    save_dir: Path | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train to the end of EPOCHS; save_state after optimizer step SAVE_AT when `save_dir`;
    with `resume`, continue from where load_state left the loader. Returns the losses (global
    mean per micro step), learning rates (per optimizer step), the final full state dict."""
    losses: list[float] = []
    lrs: list[list[float]] = []
    first_epoch, opt_step, batches, skip = 0, 0, loader, 0
    if resume:  # the documented way to resume mid-epoch: the rest of the restored epoch first
        batches = accelerator.skip_first_batches(loader)
        first_epoch, skip = loader.epoch, batches.skip
    for _ in range(first_epoch, EPOCHS):
        for step, batch in enumerate(batches, start=skip):
            output = model(**batch)
            loss = output.loss / GAS
            losses.append(accelerator.reduce(output.loss.detach().float()).item())
            accelerator.backward(loss)
            if (step + 1) % GAS == 0 or step == len(loader) - 1:
                optimizer.step()
                optimizer.zero_grad()
                scheduler.step()
                lrs.append([g["lr"] for g in optimizer.param_groups])
                opt_step += 1
                if save_dir is not None and opt_step == SAVE_AT:
                    accelerator.save_state(save_dir)
        batches, skip = loader, 0
    return {"losses": losses, "lrs": lrs, "state_dict": accelerator.get_state_dict(model)}
