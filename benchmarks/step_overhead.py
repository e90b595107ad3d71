"""Time per training step through accelerate_core vs the same loop in plain PyTorch.

An MLP of about 1M parameters, batch 64, AdamW, fp32 on CPU (CUDA when present and --cuda).
Both loops read their batches from a DataLoader over the same in-memory tensors, so the figure
includes the core's dataloader wrapper, the prepared model, backward and optimizer wrappers.
Plain and core runs are interleaved (several rounds, alternating which goes first; median and
fastest-round per-step times of each), because the machines this runs on are shared and their
speed drifts. Time is the process's CPU time by default: on a loaded machine a process is
descheduled most of the wall time, and wall-clock ratios then swing by +-20% round to round
(--wall measures wall time anyway).

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
from accelerate_core.state import shutdown_process_group

BATCH = 64
# CPU time of this process, not wall time: on a shared machine a descheduled process would
# otherwise charge other people's work to whichever loop was running (see --wall).
CLOCK = time.process_time
SAMPLES = BATCH * 40


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def make_model(tiny: bool = False) -> nn.Module:
    torch.manual_seed(0)
    if tiny:  # almost no compute: the step time is the loop's own overhead
        return nn.Linear(512, 16)
    # 512*1024 + 1024*512 + 512*16 weights (+ biases): about 1.06M parameters
    return nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 16))


def make_data() -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    return TensorDataset(
        torch.randn(SAMPLES, 512, generator=g), torch.randint(0, 16, (SAMPLES,), generator=g)
    )


def plain_runner(world: int, rank: int, device: torch.device, tiny: bool = False) -> Callable[[int], float]:
    model = make_model(tiny).to(device)
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
        done, start = 0, CLOCK()
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
        _sync()
        return (CLOCK() - start) / steps

    return run


def core_runner(world: int, cpu: bool, tiny: bool = False) -> Callable[[int], float]:
    accelerator = Accelerator(cpu=cpu)
    model = make_model(tiny)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(make_data(), batch_size=BATCH // world)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    def run(steps: int) -> float:
        done, start = 0, CLOCK()
        while done < steps:
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                done += 1
                if done == steps:
                    break
        _sync()
        return (CLOCK() - start) / steps

    return run


def measure(
    plain: Callable[[int], float], core: Callable[[int], float], rounds: int, steps: int
) -> dict[str, float]:
    plain(5)
    core(5)  # warm-up: allocator, DDP buckets, AdamW state
    plain_times, core_times = [], []
    for round_ in range(rounds):
        # Alternate which loop goes first, so a drift in machine speed favours neither.
        if round_ % 2:
            core_times.append(core(steps))
            plain_times.append(plain(steps))
        else:
            plain_times.append(plain(steps))
            core_times.append(core(steps))
    p, c = statistics.median(plain_times), statistics.median(core_times)
    # The minimum is the least disturbed round of each: on a busy machine it is the steadier figure.
    p_min, c_min = min(plain_times), min(core_times)
    return {
        "plain_ms": p * 1e3,
        "core_ms": c * 1e3,
        "ratio": c / p,
        "ratio_min": c_min / p_min,
        "overhead_us": (c_min - p_min) * 1e6,
    }


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
    shutdown_process_group()


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
        if args.wall:
            command.append("--wall")
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
    parser.add_argument("--wall", action="store_true", help="time with the wall clock, not process CPU time")
    parser.add_argument("--ddp-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    global CLOCK
    # CUDA kernels run asynchronously: CPU time says nothing about them, use synchronised wall time.
    CLOCK = time.perf_counter if args.wall or args.cuda else time.process_time
    if args.ddp_worker:
        ddp_worker(args)
        return
    params = sum(p.numel() for p in make_model().parameters())
    clock = "wall-clock" if args.wall else "process CPU"
    print(
        f"[{clock} time] MLP {params / 1e6:.2f}M parameters, global batch {BATCH}, "
        f"{args.rounds} rounds x {args.steps} steps"
    )
    device = torch.device("cuda" if args.cuda else "cpu")
    results = {
        "1 process": measure(
            plain_runner(1, 0, device), core_runner(1, not args.cuda), args.rounds, args.steps
        )
    }
    if not args.skip_ddp:
        results["DDP 2 ranks"] = run_ddp(args)
    tiny = measure(
        plain_runner(1, 0, device, tiny=True),
        core_runner(1, not args.cuda, tiny=True),
        args.rounds,
        args.steps * 4,
    )
    worst = 0.0
    for name, r in results.items():
        print(
            f"{name:12s} plain {r['plain_ms']:8.2f} ms/step   core {r['core_ms']:8.2f} ms/step   "
            f"ratio {r['ratio']:.3f} (median)  {r['ratio_min']:.3f} (fastest rounds)"
        )
        worst = max(worst, r["ratio"])
    print(
        f"loop overhead, tiny model (1 process): plain {tiny['plain_ms'] * 1e3:.0f} us/step, "
        f"core {tiny['core_ms'] * 1e3:.0f} us/step, difference {tiny['overhead_us']:.0f} us/step"
    )
    if args.max_ratio is not None and worst > args.max_ratio:
        print(f"FAIL: ratio {worst:.3f} > {args.max_ratio}")
        sys.exit(1)


if __name__ == "__main__":
    main()
