"""Time per training step through accelerate_core vs the same loop in plain PyTorch.

An MLP of about 1M parameters, batch 64, AdamW, fp32 on CPU (CUDA when present and --cuda).
Both loops read their batches from a DataLoader over the same in-memory tensors, so the figure
includes the core's dataloader wrapper, the prepared model, backward and optimizer wrappers.
Plain and core runs are interleaved (several rounds, median per-step time of each), because
the machines this runs on are shared and their speed drifts.

    python benchmarks/step_overhead.py            # 1 process, then DDP on 2 ranks (gloo)
    python benchmarks/step_overhead.py --max-ratio 1.05   # exit 1 when a ratio is above it
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from accelerate_core import Accelerator

BATCH = 64
SAMPLES = BATCH * 40


def make_model() -> nn.Module:
    torch.manual_seed(0)
    # 512*1024 + 1024*512 + 512*16 weights (+ biases): about 1.06M parameters
    return nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 16))


def make_data() -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    return TensorDataset(
        torch.randn(SAMPLES, 512, generator=g), torch.randint(0, 16, (SAMPLES,), generator=g)
    )


def plain_runner(world: int, rank: int, device: torch.device) -> Callable[[int], float]:
    model = make_model().to(device)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = make_data()
    per_rank = BATCH // world
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] | None = (
        DistributedSampler(data, world, rank, shuffle=False) if world > 1 else None
    )
    loader = DataLoader(data, batch_size=per_rank, sampler=sampler)

    def run(steps: int) -> float:
        done, start = 0, time.perf_counter()
        while done < steps:
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                done += 1
                if done == steps:
                    break
        return (time.perf_counter() - start) / steps

    return run


def core_runner(world: int, cpu: bool) -> Callable[[int], float]:
    accelerator = Accelerator(cpu=cpu)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(make_data(), batch_size=BATCH // world)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    def run(steps: int) -> float:
        done, start = 0, time.perf_counter()
        while done < steps:
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                done += 1
                if done == steps:
                    break
        return (time.perf_counter() - start) / steps

    return run


def measure(
    plain: Callable[[int], float], core: Callable[[int], float], rounds: int, steps: int
) -> dict[str, float]:
    plain(5)
    core(5)  # warm-up: allocator, DDP buckets, AdamW state
    plain_times, core_times = [], []
    for _ in range(rounds):
        plain_times.append(plain(steps))
        core_times.append(core(steps))
    p, c = statistics.median(plain_times), statistics.median(core_times)
    return {"plain_ms": p * 1e3, "core_ms": c * 1e3, "ratio": c / p}


def ddp_worker(args: argparse.Namespace) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cpu = not args.cuda
    device = torch.device("cpu") if cpu else torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("gloo" if cpu else "nccl")  # the Accelerator reuses this group
    plain = plain_runner(world, rank, device)
    core = core_runner(world, cpu)
    result = measure(plain, core, args.rounds, args.steps)
    if rank == 0:
        Path(args.result).write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


def run_ddp(args: argparse.Namespace) -> dict[str, float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "ddp.json"
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            __file__,
            "--ddp-worker",
            "--result",
            str(result),
            "--rounds",
            str(args.rounds),
            "--steps",
            str(args.steps),
        ]
        if args.cuda:
            command.append("--cuda")
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        subprocess.run(command, check=True, env=env, timeout=900)
        out: dict[str, float] = json.loads(result.read_text())
        return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--cuda", action="store_true")
    parser.add_argument("--max-ratio", type=float, default=None)
    parser.add_argument("--skip-ddp", action="store_true")
    parser.add_argument("--ddp-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.ddp_worker:
        ddp_worker(args)
        return
    params = sum(p.numel() for p in make_model().parameters())
    print(
        f"MLP {params / 1e6:.2f}M parameters, global batch {BATCH}, {args.rounds} rounds x {args.steps} steps"
    )
    device = torch.device("cuda" if args.cuda else "cpu")
    results = {
        "1 process": measure(
            plain_runner(1, 0, device), core_runner(1, not args.cuda), args.rounds, args.steps
        )
    }
    if not args.skip_ddp:
        results["DDP 2 ranks"] = run_ddp(args)
    worst = 0.0
    for name, r in results.items():
        print(
            f"{name:12s} plain {r['plain_ms']:8.2f} ms/step   "
            f"core {r['core_ms']:8.2f} ms/step   ratio {r['ratio']:.3f}"
        )
        worst = max(worst, r["ratio"])
    if args.max_ratio is not None and worst > args.max_ratio:
        print(f"FAIL: ratio {worst:.3f} > {args.max_ratio}")
        sys.exit(1)


if __name__ == "__main__":
    main()
