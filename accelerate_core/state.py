"""Where this process sits in the launch: rank, world size and device, read from the launcher.

`torch.distributed.run` (and `accelerate-core launch`, which uses it) exports RANK, LOCAL_RANK and
WORLD_SIZE; a plain `python script.py` exports none of them and is rank 0 of 1. The process group
is created only when a strategy asks for it, and an existing default group is always reused: the
harness builds many Accelerators one after another inside one launch. The default group, created
or reused, is destroyed once, at interpreter exit (see `shutdown_process_group`).
"""

from __future__ import annotations

import atexit
import gc
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from accelerate_core.errors import InvalidSettingError, explain

_CPU = torch.device("cpu")


@dataclass(frozen=True)
class ProcessState:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: torch.device = _CPU

    @classmethod
    def from_environ(cls, cpu: bool = False, environ: Mapping[str, str] | None = None) -> ProcessState:
        """Read the launcher's variables; `cpu` forces the CPU even when CUDA is available."""
        env = os.environ if environ is None else environ
        rank = _int_var(env, "RANK", 0)
        local_rank = _int_var(env, "LOCAL_RANK", rank)
        world_size = _int_var(env, "WORLD_SIZE", 1)
        if world_size < 1 or not 0 <= rank < world_size:
            raise InvalidSettingError(
                explain(
                    f"RANK={rank}, WORLD_SIZE={world_size}",
                    "the rank must lie in [0, WORLD_SIZE) and WORLD_SIZE must be >= 1",
                    "values exported by torch.distributed.run",
                    "start the script with `accelerate-core launch` or `torchrun`, or unset them",
                )
            )
        if cpu or not torch.cuda.is_available():
            device = torch.device("cpu")
        else:
            device = torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
        return cls(rank=rank, local_rank=local_rank, world_size=world_size, device=device)

    @property
    def is_main_process(self) -> bool:
        return self.rank == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.local_rank == 0

    @property
    def distributed(self) -> bool:
        """True when a default process group exists (created by us or by the caller)."""
        return dist.is_available() and dist.is_initialized()

    def init_process_group(self, backend: str) -> None:
        """Create the default process group, or reuse the one that exists.

        A single process without a launcher gets a rendezvous on a free local port, so that
        backends that always need a group (DDP with one rank, DeepSpeed) work from plain python.
        """
        if self.distributed:
            if dist.get_world_size() != self.world_size:
                raise InvalidSettingError(
                    explain(
                        f"an existing process group of size {dist.get_world_size()}",
                        f"WORLD_SIZE says {self.world_size}",
                        "one process group per launch, matching WORLD_SIZE",
                        "do not change WORLD_SIZE inside a running launch",
                    )
                )
            _shut_down_at_exit()
            return
        if self.world_size == 1:
            ensure_single_process_rendezvous()
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        dist.init_process_group(
            backend=backend, rank=self.rank, world_size=self.world_size, timeout=timedelta(minutes=10)
        )
        _shut_down_at_exit()

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


_exit_hook_registered = False


def _shut_down_at_exit() -> None:
    """Register `shutdown_process_group` at exit, once per process: it runs after the user's own
    exit hooks registered later (atexit is last-in first-out), so those can still use the group."""
    global _exit_hook_registered
    if not _exit_hook_registered:
        atexit.register(shutdown_process_group)
        _exit_hook_registered = True


# How long the exit hook leaves the GIL free for gloo's worker threads (see below). Measured: 50 ms
# took 2-rank launches on a loaded 2-core machine from 6-40% aborts to none in 116.
_GLOO_SETTLE_SECONDS = 0.05


def shutdown_process_group() -> None:
    """Destroy the default process group so that the interpreter can exit cleanly.

    The core runs this at exit once it has used a default group (its own or the script's); a script
    that creates a group without ever preparing an Accelerator calls it last instead of
    `dist.destroy_process_group()`.

    Why: user scripts (the user loop among them) end without `destroy_process_group`. Gloo's
    worker threads free a finished work object after `wait()` has already returned to Python, and
    freeing it drops tensor references, which takes the GIL. If that happens once the interpreter
    is finalizing, CPython ends the thread inside a noexcept destructor and the rank aborts with
    "terminate called without an active exception" (SIGABRT; torch 2.13, the upstream attempt to
    fix it is pytorch/pytorch#179291). Destroying the group joins those threads only when nothing
    else holds it, and a user's DDP module does; so the hook also leaves the GIL free for a
    moment, while the interpreter is still whole, for the threads to finish. That wait is needed
    even when the user destroyed the group already (its threads live on while DDP holds it).
    """
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()  # a group only reachable through garbage cycles is destroyed (threads joined) now
    time.sleep(_GLOO_SETTLE_SECONDS)


def ensure_single_process_rendezvous() -> None:
    """Export the variables a one-process group needs when no launcher set them."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])


def _int_var(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidSettingError(
            explain(
                f"environment variable {name}={raw!r}",
                "it is not a whole number",
                "integers as exported by torch.distributed.run",
                f"unset {name} or start the script with `accelerate-core launch`",
            )
        ) from None
