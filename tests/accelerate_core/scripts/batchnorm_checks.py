"""One launch, many BatchNorm checks: run under `torch.distributed.run` by test_batchnorm_training.py.

Each check builds its own Accelerator (in the launch's process group), trains a small
Linear -> BatchNorm1d -> ReLU -> Linear model with the user loop for a few steps, and writes on
rank 0 what it observed to OUT/<check>.pt: every rank's loss per step, the averaged gradients
of each step (read back from SGD's momentum buffers), the consolidated state dict (buffers
included), every rank's own running statistics, and the gathered eval outputs. The test
compares these with plain-PyTorch loops it runs itself (`single_process_reference`,
`per_rank_reference`: no accelerate_core).

    batchnorm_checks.py --out DIR --checks ddp:no:sync,zero3:bf16:plain,...

A check is STRATEGY:PRECISION:MODE with STRATEGY ddp|zero1|zero2|zero3, PRECISION no|bf16|fp16,
MODE sync (Accelerator(sync_batchnorm=True)) or plain.

`main(argv)` is also what scripts/scenarios.py calls: the tests run these checks as their part
of the session's shared 2-rank launch (tests/accelerate_core/shared_launch.py).
"""

from __future__ import annotations

import argparse
import copy
import gc
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

FEATURES, HIDDEN = 6, 8
BATCH = 4  # per process
STEPS = 5
LR, MOMENTUM = 0.05, 0.9
# ZeRO-3 partitions every parameter (as the harness's zero3 cells do), so the BatchNorm hooks
# meet partitioned weights that ZeRO-3 gathers and releases around each forward.
FORCE_ZERO3_PARTITIONING = {"zero_optimization": {
    "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0,
    "stage3_prefetch_bucket_size": 0}}
# fp16's first loss scale, here and in the amp reference (GradScaler(init_scale=...)): at the
# default 2**16, a rank's gradient x scale of this task (BatchNorm over 4 samples) exceeds fp16's
# range in DeepSpeed's fp16 gradients (amp's are fp32 and do not), and DeepSpeed would skip a
# step amp takes: the documented difference of precision/deepspeed.py, not what is tested here.
FP16_INITIAL_SCALE_POWER = 12


class Output(dict):  # what a HF-style model returns: attribute access to .loss
    __getattr__ = dict.__getitem__


class BatchNormNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.BatchNorm1d(HIDDEN), nn.ReLU(),
                                 nn.Linear(HIDDEN, 1))

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> Output:
        y = self.net(x).squeeze(-1).float()
        return Output(loss=nn.functional.mse_loss(y, labels.float()), logits=y)


def make_model() -> tuple[BatchNormNet, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = BatchNormNet()
    return model, torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)


def global_batches(world: int) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """STEPS global batches of world x BATCH samples (rank r takes the r-th block of BATCH), and
    an eval batch of the same size. Features are offset and scaled so the statistics matter."""
    g = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(STEPS + 1):
        x = 1.0 + torch.randn(world * BATCH, FEATURES, generator=g)
        # Targets of size ~0.3 keep gradients x 2**16 (DeepSpeed's first fp16 loss scale) inside fp16's
        # range, so neither DeepSpeed nor amp skips a step (see test_deepspeed_training.py).
        batches.append((x, 0.3 * torch.sin(x.sum(-1)) + 0.03 * torch.randn(world * BATCH, generator=g)))
    return batches[:-1], batches[-1][0]


def _shard(t: torch.Tensor, rank: int) -> torch.Tensor:
    return t[rank * BATCH:(rank + 1) * BATCH]


def _autocast(precision: str) -> Any:
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    return torch.autocast("cpu", dtype=dtype, enabled=precision != "no")


def _scaler(precision: str) -> torch.amp.GradScaler:
    return torch.amp.GradScaler("cpu", init_scale=2.0**FP16_INITIAL_SCALE_POWER, enabled=precision == "fp16")


def single_process_reference(world: int, precision: str = "no") -> dict[str, Any]:
    """One process on the whole global batch (torch.autocast + GradScaler for half precision):
    what synchronised BatchNorm on `world` ranks must reproduce. Losses are per rank's samples."""
    model, optimizer = make_model()
    scaler = _scaler(precision)
    batches, eval_x = global_batches(world)
    losses, grads = [], []
    for x, y in batches:
        with _autocast(precision):
            pred = model.net(x).squeeze(-1).float()
        per_rank = torch.stack([nn.functional.mse_loss(_shard(pred, r), _shard(y, r)) for r in range(world)])
        scaler.scale(per_rank.mean()).backward()
        scaler.unscale_(optimizer)
        losses.append(per_rank.detach())
        grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters()})  # type: ignore[union-attr]
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad(), _autocast(precision):
        eval_out = model.net(eval_x).squeeze(-1).float()
    return {"losses": torch.stack(losses), "grads": grads, "state_dict": model.state_dict(),
            "eval": eval_out}


def per_rank_reference(world: int, precision: str = "no") -> dict[str, Any]:
    """Plain BatchNorm on `world` ranks, done in one process: each rank's shard is normalised
    with its own statistics and updates its own running statistics (a buffer set per rank,
    substituted through torch.func.functional_call); gradients are averaged over ranks as DDP
    and ZeRO do. The state dict holds rank 0's buffers (what get_state_dict returns)."""
    model, optimizer = make_model()
    scaler = _scaler(precision)
    buffers = [{n: b.clone() for n, b in model.net.named_buffers()} for _ in range(world)]
    batches, eval_x = global_batches(world)
    losses, grads = [], []
    for x, y in batches:
        per_rank = []
        for r in range(world):
            with _autocast(precision):
                pred = functional_call(model.net, buffers[r], (_shard(x, r),), strict=False)
            per_rank.append(nn.functional.mse_loss(pred.squeeze(-1).float(), _shard(y, r)))
        stacked = torch.stack(per_rank)
        scaler.scale(stacked.mean()).backward()
        scaler.unscale_(optimizer)
        losses.append(stacked.detach())
        grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters()})  # type: ignore[union-attr]
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    model.load_state_dict({**model.state_dict(), **{f"net.{k}": v for k, v in buffers[0].items()}})
    model.eval()
    with torch.no_grad(), _autocast(precision):
        eval_out = torch.cat([functional_call(model.net, buffers[r], (_shard(eval_x, r),), strict=False)
                              for r in range(world)]).squeeze(-1).float()
    return {"losses": torch.stack(losses), "grads": grads, "state_dict": model.state_dict(),
            "eval": eval_out}


def _momentum_buffers(accelerator: Any, model: nn.Module, optimizer: Any, zero: bool
                      ) -> dict[str, torch.Tensor]:
    """SGD's momentum buffer of every parameter after a step: buf_t = MOMENTUM * buf_(t-1) + g_t,
    so the test recovers each step's averaged gradient g_t from two consecutive ones. (DeepSpeed's
    ZeRO-1/2 gradients are not readable after backward when the step reduces them; the optimizer
    state is, under every stage, through DeepSpeed's public accessor, in fp32 runs: with a bf16
    engine, DeepSpeed 0.19.8's safe_get_full_optimizer_state fails inside (its optim_fragment
    is None), so half-precision runs record no gradients and are judged on the rest.)"""
    unwrapped = accelerator.unwrap_model(model)
    if not zero:
        state = optimizer.optimizer.state
        return {n: state[p]["momentum_buffer"].detach().float().clone()
                for n, p in unwrapped.named_parameters()}
    from deepspeed.utils import safe_get_full_optimizer_state  # every rank: a collective

    return {n: safe_get_full_optimizer_state(p, "momentum_buffer").detach().float().clone()
            for n, p in unwrapped.named_parameters()}


def gradients(momentum: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
    """Each step's gradient from SGD's momentum buffers (the first buffer is the first gradient)."""
    previous: dict[str, torch.Tensor] = {n: torch.zeros_like(b) for n, b in (momentum[:1] or [{}])[0].items()}
    out = []
    for buffers in momentum:
        out.append({n: b - MOMENTUM * previous[n] for n, b in buffers.items()})
        previous = buffers
    return out


def run_check(strategy: str, precision: str, sync: bool) -> dict[str, Any]:
    from accelerate_core import Accelerator, DeepSpeedPlugin
    from accelerate_core.sync_batchnorm import count_batchnorm_layers

    zero = strategy.startswith("zero")
    plugin = None
    if zero:
        stage = int(strategy[-1])
        config: dict[str, Any] = dict(FORCE_ZERO3_PARTITIONING) if stage == 3 else {}
        if precision == "fp16":
            config["fp16"] = {"initial_scale_power": FP16_INITIAL_SCALE_POWER}
        plugin = DeepSpeedPlugin(zero_stage=stage, cpu_fp16_emulation=precision == "fp16", config=config)
    accelerator = Accelerator(cpu=True, mixed_precision=precision, deepspeed_plugin=plugin,
                              sync_batchnorm=sync)
    world, rank = accelerator.num_processes, accelerator.process_index
    model, optimizer = make_model()
    # A one-batch dataloader only tells DeepSpeed the per-process batch size; the loop below
    # feeds this rank's shard of each global batch itself.
    sizes = torch.utils.data.DataLoader(torch.zeros(world * BATCH, 1), batch_size=BATCH)
    model, optimizer, _ = accelerator.prepare(model, optimizer, sizes)
    batches, eval_x = global_batches(world)
    losses, momentum, overflows = [], [], []
    for x, y in batches:
        output = model(x=_shard(x, rank), labels=_shard(y, rank))
        accelerator.backward(output.loss)
        losses.append(accelerator.gather(output.loss.detach().float().reshape(1)))
        optimizer.step()
        optimizer.zero_grad()
        if precision == "no":  # see _momentum_buffers
            momentum.append(_momentum_buffers(accelerator, model, optimizer, zero))
        overflows.append(optimizer.is_overflow)
    unwrapped = accelerator.unwrap_model(model)
    bn = unwrapped.net[1]
    own_stats = torch.cat([bn.running_mean.float(), bn.running_var.float()]).reshape(1, -1)
    model.eval()
    eval_out = accelerator.gather(model(x=_shard(eval_x, rank), labels=torch.zeros(BATCH)).logits.float())
    record = {
        "losses": torch.stack(losses).reshape(len(batches), world), "grads": gradients(momentum),
        "overflows": overflows, "eval": eval_out,
        "state_dict": accelerator.get_state_dict(model),
        "rank_stats": accelerator.gather(own_stats),  # row r: rank r's running mean and var
        "batchnorm_layers": count_batchnorm_layers(unwrapped),  # (plain, synchronised)
        "strategy": accelerator.strategy.registered_name, "world": world,
        "emulated": accelerator.strategy.emulated,
    }
    accelerator.free_memory()
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--checks", required=True, help="comma-separated STRATEGY:PRECISION:MODE")
    args = parser.parse_args(argv)
    import torch.distributed as dist

    for check in args.checks.split(","):
        strategy, precision, mode = check.split(":")
        record = run_check(strategy, precision, mode == "sync")
        if not dist.is_initialized() or dist.get_rank() == 0:
            torch.save(copy.deepcopy(record), args.out / f"{check.replace(':', '_')}.pt")
        # What survived this check lives as long as the launch: left out of the next checks'
        # gc.collect() calls (free_memory, teardown), which otherwise walk all of torch and
        # deepspeed each time (harness/rank/worker.py says more).
        gc.collect()
        gc.freeze()


if __name__ == "__main__":
    main()
