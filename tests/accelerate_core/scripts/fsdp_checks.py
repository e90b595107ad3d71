"""FSDP2 behaviour on 2 ranks, recorded for test_fsdp_mission.py (which computes the plain
single-process reference itself and asserts):

- `sharding`: the default wrapping of a 2-Linear model; its parameters as DTensors (each rank's
  shard size and the full size), which modules became units, the optimizer built BEFORE prepare()
  pointing at the sharded parameters; 3 steps of AdamW on a fixed global batch with
  clip_grad_norm_ (the returned norms and the final full state dict, also from rank 1);
  accelerator.gather of a per-rank tensor.
- `wrap_classes` / `wrap_callable`: which units FSDPPlugin(wrap=[nn.Linear]) and a callable (with
  reshard_after_forward=False) chose, and the same 3 steps trained through them.
- `stepped_before`: an optimizer that already stepped (holds state) before prepare(): its state
  follows its parameters into the shards and training continues from it.
- `one_rank_overflow`: fp16; at step 1 an inf is written into ONE element of rank 1's gradient
  shard only (after backward, so no other rank sees it): every rank must skip that step.
- `tied`: a model whose head shares its weight with the embedding, default wrap: the tie after
  prepare, training, get_state_dict, save_state, one more step, load_state and that step again.
- `batchnorm_bf16`: Linear, SyncBatchNorm, ReLU, Linear in one child under bf16: the dtypes each
  module's weight and input had in the forward (forward pre-hooks) and the losses of 3 steps.

    fsdp_checks.py --out DIR   (rank r writes DIR/<check>.rank<r>.pt)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo root, for `tests.*`

from accelerate_core import Accelerator, FSDPPlugin

IN, HIDDEN, OUT = 6, 10, 3  # 10 and 3 rows: shards of unequal size on 2 ranks (5+5, 2+1)
GLOBAL_BATCH = 8
STEPS = 3
MAX_NORM = 0.05  # small: every step clips
LR = 1e-2


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, OUT))


def make_nested() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh()), nn.Linear(HIDDEN, OUT))


VOCAB, DIM, LENGTH = 7, 4, 5  # 7 embedding rows: shards of 4 and 3


class TiedLM(nn.Module):
    """An embedding and an output head sharing one weight, as the harness's lm task."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.body = nn.Linear(DIM, DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.body(self.embed(ids))))


def make_tied() -> TiedLM:
    torch.manual_seed(0)
    return TiedLM()


def tied_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(200 + step)
    return (torch.randint(0, VOCAB, (GLOBAL_BATCH, LENGTH), generator=g),
            torch.randint(0, VOCAB, (GLOBAL_BATCH, LENGTH), generator=g))


def tied_loss(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(ids).flatten(0, 1), labels.flatten())


def make_batchnorm() -> nn.Sequential:
    torch.manual_seed(0)
    # One child: the default wrap makes it a bf16 unit, the BatchNorm inside it an fp32 unit, and
    # the Linear after the BatchNorm is in the bf16 unit (no unit boundary casts its input).
    return nn.Sequential(nn.Sequential(nn.Linear(IN, HIDDEN), nn.BatchNorm1d(HIDDEN), nn.ReLU(),
                                       nn.Linear(HIDDEN, OUT)))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(GLOBAL_BATCH, IN, generator=g), torch.randn(GLOBAL_BATCH, OUT, generator=g)


def local(tensor: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    per = tensor.shape[0] // world
    return tensor[rank * per:(rank + 1) * per]


def train(accelerator: Accelerator, model: nn.Module, optimizer: Any, steps: range) -> dict[str, list[float]]:
    record: dict[str, list[float]] = {"losses": [], "norms": []}
    for step in steps:
        x, y = batch(step)
        x = local(x, accelerator.process_index, accelerator.num_processes)
        y = local(y, accelerator.process_index, accelerator.num_processes)
        loss = nn.functional.mse_loss(model(x), y)
        record["losses"].append(accelerator.reduce(loss.detach()).item())
        accelerator.backward(loss)
        record["norms"].append(float(accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)))
        optimizer.step()
        optimizer.zero_grad()
    return record


def sharding(out: Path) -> Accelerator:
    accelerator = Accelerator(cpu=True, fsdp_plugin=FSDPPlugin())
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)  # built before prepare, as users do
    model, optimizer = accelerator.prepare(model, optimizer)
    params = dict(model.named_parameters())
    opt_params = [p for g in optimizer.param_groups for p in g["params"]]
    record: dict[str, Any] = {
        "strategy": accelerator.strategy.registered_name,
        "is_dtensor": {n: isinstance(p, DTensor) for n, p in params.items()},
        "local_numel": {n: p.to_local().numel() for n, p in params.items() if isinstance(p, DTensor)},
        "full_shape": {n: tuple(p.shape) for n, p in params.items()},
        "wrapped": accelerator.strategy.wrapped_modules,  # type: ignore[attr-defined]
        "unsharded": accelerator.strategy.unsharded_parameters,  # type: ignore[attr-defined]
        "optimizer_holds_model_params": len(opt_params) == len(params)
        and all(any(p is q for q in params.values()) for p in opt_params),
        "unwrapped_is_model": accelerator.unwrap_model(model) is model,
        **train(accelerator, model, optimizer, range(STEPS)),
    }
    mine = torch.arange(3, dtype=torch.float32) + 10 * accelerator.process_index
    record["gathered"] = accelerator.gather(mine)
    record["state_dict"] = accelerator.get_state_dict(model)
    torch.save(record, out / f"sharding.rank{accelerator.process_index}.pt")
    return accelerator


def wrap_check(out: Path, name: str, plugin: FSDPPlugin) -> Accelerator:
    """Which units `plugin` chose, and the same training as `sharding` on the nested model (its
    Linears are created in the same order from the same seed: the same weights)."""
    accelerator = Accelerator(cpu=True, fsdp_plugin=plugin)
    model = make_nested()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=LR))
    record = {"wrapped": accelerator.strategy.wrapped_modules,  # type: ignore[attr-defined]
              "unsharded": accelerator.strategy.unsharded_parameters,  # type: ignore[attr-defined]
              "all_dtensor": all(isinstance(p, DTensor) for p in model.parameters()),
              **train(accelerator, model, optimizer, range(STEPS))}
    torch.save(record, out / f"{name}.rank{accelerator.process_index}.pt")
    return accelerator


def stepped_before(out: Path) -> Accelerator:
    accelerator = Accelerator(cpu=True, fsdp_plugin=FSDPPlugin())
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    # One plain step on the whole batch 0 in every process (the same in each), before prepare().
    x, y = batch(0)
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
    model, optimizer = accelerator.prepare(model, optimizer)
    record: dict[str, Any] = {
        "state_is_dtensor": all(isinstance(v, DTensor) for s in optimizer.state.values()
                                for k, v in s.items() if k != "step"),
        **train(accelerator, model, optimizer, range(1, STEPS)),
    }
    record["state_dict"] = accelerator.get_state_dict(model)
    torch.save(record, out / f"stepped_before.rank{accelerator.process_index}.pt")
    return accelerator


def one_rank_overflow(out: Path) -> Accelerator:
    accelerator = Accelerator(cpu=True, mixed_precision="fp16", fsdp_plugin=FSDPPlugin())
    model = make_model()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=LR))
    rank, world = accelerator.process_index, accelerator.num_processes
    record: dict[str, Any] = {"skipped": [], "scales": [], "moved": []}
    for step in range(STEPS):
        x, y = batch(step)
        accelerator.backward(nn.functional.mse_loss(model(local(x, rank, world)), local(y, rank, world)))
        if step == 1 and rank == 1:
            grad = next(iter(model.parameters())).grad
            grad.to_local().view(-1)[0] = float("inf")  # this rank's shard only
        before = torch.cat([p.to_local().detach().reshape(-1).clone() for p in model.parameters()])
        optimizer.step()
        optimizer.zero_grad()
        after = torch.cat([p.to_local().detach().reshape(-1) for p in model.parameters()])
        record["skipped"].append(optimizer.is_overflow)
        record["scales"].append(accelerator.loss_scale())
        record["moved"].append(not torch.equal(before, after))
    torch.save(record, out / f"one_rank_overflow.rank{rank}.pt")
    return accelerator


def tied(out: Path) -> Accelerator:
    accelerator = Accelerator(cpu=True, fsdp_plugin=FSDPPlugin())
    model = make_tied()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=LR))
    rank, world = accelerator.process_index, accelerator.num_processes

    def step(index: int) -> float:
        ids, labels = (local(t, rank, world) for t in tied_batch(index))
        loss = tied_loss(model, ids, labels)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        return accelerator.reduce(loss.detach()).item()

    record: dict[str, Any] = {"wrapped": accelerator.strategy.wrapped_modules,  # type: ignore[attr-defined]
                              "tied_after_prepare": model.head.weight is model.embed.weight,
                              "losses": [step(i) for i in range(STEPS)]}
    record["state_dict"] = accelerator.get_state_dict(model)
    accelerator.save_state(out / "tied_ckpt")
    record["after_save"] = step(STEPS)
    accelerator.load_state(out / "tied_ckpt")
    record["tied_after_load"] = model.head.weight is model.embed.weight
    record["after_load"] = step(STEPS)
    record["final_state_dict"] = accelerator.get_state_dict(model)
    torch.save(record, out / f"tied.rank{rank}.pt")
    return accelerator


def batchnorm_bf16(out: Path) -> Accelerator:
    accelerator = Accelerator(cpu=True, mixed_precision="bf16", sync_batchnorm=True, fsdp_plugin=FSDPPlugin())
    model = make_batchnorm()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=LR))
    seen: dict[str, tuple[str, str]] = {}

    def remember(name: str) -> Any:
        # Registered after fully_shard's own pre-hook: the weight is the all-gathered one.
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            seen[f"{name}:{type(module).__name__}"] = (str(module.weight.dtype), str(args[0].dtype))
        return hook

    for name, module in model.named_modules():
        if getattr(module, "weight", None) is not None:
            module.register_forward_pre_hook(remember(name))
    record: dict[str, Any] = {"wrapped": accelerator.strategy.wrapped_modules,  # type: ignore[attr-defined]
                              **train(accelerator, model, optimizer, range(STEPS))}
    record["forward_dtypes"] = seen
    torch.save(record, out / f"batchnorm_bf16.rank{accelerator.process_index}.pt")
    return accelerator


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    # Each check its own Accelerator, freed before the next (as the harness runs cells).
    for run in (lambda: sharding(out),
                lambda: wrap_check(out, "wrap_classes", FSDPPlugin(wrap=[nn.Linear])),
                lambda: wrap_check(out, "wrap_callable", FSDPPlugin(wrap=lambda name, module: name == "0",
                                                                    reshard_after_forward=False)),
                lambda: stepped_before(out),
                lambda: one_rank_overflow(out),
                lambda: tied(out),
                lambda: batchnorm_bf16(out)):
        accelerator = run()
        accelerator.wait_for_everyone()
        accelerator.free_memory()


if __name__ == "__main__":
    main()
