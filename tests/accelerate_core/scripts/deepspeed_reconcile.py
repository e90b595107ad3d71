"""One 2-rank launch of the checks where DeepSpeed alone trains differently from a plain loop and
the core reconciles it (test_deepspeed_reconcile.py compares the records with plain PyTorch):

- rootparam:3   a parameter owned by the root module, nested-dataclass output, ZeRO-3 fp32;
- buffer:S:bf16 fp32 buffers used in a matmul and an add with bf16 activations (ZeRO-S), and the
                same forward without the core's autocast (DeepSpeed alone: a dtype error);
- scalar:S      0-dim parameters under ZeRO-S (DeepSpeed alone fails in its start-up broadcast);
                rank 1 starts from other values, so rank 0's must reach it through that broadcast;
- savestate_misuse:3  save_state on the main process only: CollectiveMisuseError, not a hang.

    deepspeed_reconcile.py --out DIR --checks rootparam:3,buffer:2:bf16,savestate_misuse:3

`main(argv)` is also what scripts/scenarios.py calls: the tests run these checks as their part
of the session's shared 2-rank launch (tests/accelerate_core/shared_launch.py).
"""

from __future__ import annotations

import argparse
import copy
import gc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

BATCH, STEPS, LR = 4, 6, 0.3  # per-process batch; SGD steps; one epoch


@dataclass(frozen=True)
class Inner:
    hidden: torch.Tensor


@dataclass(frozen=True)
class Out:  # a plain (frozen) dataclass, not a dict: what DeepSpeed cannot look into
    loss: torch.Tensor
    logits: torch.Tensor
    inner: Inner


class RootOwned(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(5, 8)
        self.position = nn.Parameter(0.1 * torch.randn(8))  # owned by the root, used directly
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Out:
        hidden = torch.tanh(self.proj(x) * self.position + self.position)
        logits = self.head(hidden).squeeze(-1)
        return Out(loss=nn.functional.mse_loss(logits, y), logits=logits, inner=Inner(hidden))


class WithBuffers(nn.Module):
    mix: torch.Tensor
    shift: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mix", torch.eye(5) + 0.1 * torch.randn(5, 5))  # used in a matmul
        self.register_buffer("shift", torch.full((1,), 0.123456))  # added to the output
        self.body = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Out:
        hidden = x @ self.mix
        logits = self.body(hidden).squeeze(-1) + self.shift
        return Out(loss=nn.functional.mse_loss(logits, y), logits=logits, inner=Inner(hidden))


class Scalars(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(0.3))  # 0-dim, as in HF accelerate's RegressionModel
        self.b = nn.Parameter(torch.tensor(-0.2))
        self.proj = nn.Linear(5, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Out:
        logits = self.a * self.proj(x).squeeze(-1) + self.b
        return Out(loss=nn.functional.mse_loss(logits, y), logits=logits, inner=Inner(logits))


MODELS = {"rootparam": RootOwned, "buffer": WithBuffers, "scalar": Scalars}


def make(kind: str, world: int) -> tuple[nn.Module, torch.optim.Optimizer, TensorDataset]:
    torch.manual_seed(0)
    model = MODELS[kind]()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(STEPS * BATCH * world, 5, generator=g)
    y = torch.sin(x.sum(-1))
    return model, torch.optim.SGD(model.parameters(), lr=LR), TensorDataset(x, y)


def plain_reference(kind: str, world: int, precision: str = "no") -> dict[str, Any]:
    """One process, global batch = the ranks' batches together (equal sizes, so the mean loss's
    gradient is DDP's average); bf16 through torch.autocast. Imports nothing from the core."""
    model, optimizer, data = make(kind, world)
    losses = []
    for x, y in DataLoader(data, batch_size=BATCH * world, shuffle=False):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            per_rank = [model(x[r * BATCH:(r + 1) * BATCH], y[r * BATCH:(r + 1) * BATCH])
                        for r in range(world)]
        loss = torch.stack([o.loss.float() for o in per_rank]).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(torch.stack([o.loss.detach().float() for o in per_rank]))
    return {"losses": torch.stack(losses), "state_dict": model.state_dict()}


def check_train(kind: str, stage: int, precision: str) -> dict[str, Any]:
    """The user loop (output.loss, accelerator.backward, optimizer.step/zero_grad)."""
    from accelerate_core import Accelerator, DeepSpeedPlugin

    accelerator = Accelerator(cpu=True, mixed_precision=precision,
                              deepspeed_plugin=DeepSpeedPlugin(zero_stage=stage))
    model, optimizer, data = make(kind, accelerator.num_processes)
    if kind == "scalar" and accelerator.process_index != 0:
        with torch.no_grad():  # only DeepSpeed's start-up broadcast can make the ranks agree
            for param in model.parameters():
                param.add_(1.0)
    loader = DataLoader(data, batch_size=BATCH, shuffle=False,
                        collate_fn=lambda rows: {"x": torch.stack([r[0] for r in rows]),
                                                 "y": torch.stack([r[1] for r in rows])})
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    user_model = accelerator.unwrap_model(model)
    shapes = [tuple(getattr(p, "ds_shape", p.shape)) for p in user_model.parameters()]
    losses, output_types = [], set()
    for batch in loader:
        output = model(**batch)
        output_types.add((type(output).__name__, type(output.inner).__name__))
        accelerator.backward(output.loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.gather(output.loss.detach().float().reshape(1)))
    record: dict[str, Any] = {"losses": torch.stack(losses), "output_types": sorted(output_types),
                              "shapes": [shapes, [tuple(getattr(p, "ds_shape", p.shape))
                                                  for p in user_model.parameters()]],
                              "state_dict": accelerator.get_state_dict(model)}
    if precision != "no":  # the same forward without the core's autocast: DeepSpeed alone
        from accelerate_core.precision.base import unwrap_forward

        strategy: Any = accelerator.strategy
        unwrap_forward(strategy.engine)
        try:
            model(**batch)
            record["without_autocast"] = "no error"
        except RuntimeError as exc:
            record["without_autocast"] = str(exc).splitlines()[0]
    accelerator.free_memory()
    return record


def check_savestate_misuse(stage: int, out: Path) -> dict[str, Any]:
    from accelerate_core import Accelerator, DeepSpeedPlugin
    from accelerate_core.errors import CollectiveMisuseError

    accelerator = Accelerator(cpu=True, deepspeed_plugin=DeepSpeedPlugin(zero_stage=stage,
                                                                         collective_timeout_s=3.0))
    model, optimizer, data = make("rootparam", accelerator.num_processes)
    accelerator.prepare(model, optimizer, DataLoader(data, batch_size=BATCH))
    record: dict[str, Any] = {"raised": None, "message": ""}
    if accelerator.is_main_process:
        try:
            accelerator.save_state(out / "misuse_ckpt")
        except CollectiveMisuseError as exc:
            record = {"raised": type(exc).__name__, "message": str(exc)}
    accelerator.wait_for_everyone()  # the default group still works after the explained error
    accelerator.free_memory()
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--checks", required=True)
    args = parser.parse_args(argv)
    import torch.distributed as dist

    for check in args.checks.split(","):
        kind, *params = check.split(":")
        if kind == "savestate_misuse":
            record = check_savestate_misuse(int(params[0]), args.out)
        elif kind in MODELS:
            record = check_train(kind, int(params[0]), params[1] if len(params) > 1 else "no")
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
