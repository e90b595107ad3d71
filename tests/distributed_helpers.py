"""Run a script on N real processes through `python -m torch.distributed.run` (no mocks).

Shared by the core's, the DeepSpeed and the CLI tests. The rendezvous uses a free port on
127.0.0.1; a run that fails or times out raises with the tail of its output, and a timed-out run
has its whole process group killed so no rank is left behind.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
_TAIL = 6000


class DistributedRunError(RuntimeError):
    """A distributed run exited non-zero or ran past its timeout."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_distributed(
    script: Path,
    nproc: int,
    args: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """Launch `script args...` on `nproc` local processes; return the finished process.

    `env` is added to this process's environment (the repo root is put on PYTHONPATH so test
    scripts can import `tests.*`). Output is captured as text (stdout and stderr interleaved).
    """
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), full_env.get("PYTHONPATH", "")) if p
    )
    # One thread per rank: the machines running these tests are small and shared.
    full_env.setdefault("OMP_NUM_THREADS", "1")
    if env:
        full_env.update(env)
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc_per_node", str(nproc), "--nnodes", "1",
        "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        str(script), *(args or []),
    ]
    proc = subprocess.Popen(
        command, env=full_env, cwd=str(REPO_ROOT), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The launcher and its ranks share the new session's process group: kill them all.
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise DistributedRunError(
            f"{script.name} on {nproc} processes timed out after {timeout:.0f}s; output tail:\n"
            f"{out[-_TAIL:]}"
        ) from None
    result = subprocess.CompletedProcess(command, proc.returncode, out, "")
    if proc.returncode != 0:
        raise DistributedRunError(
            f"{script.name} on {nproc} processes exited with {proc.returncode}; output tail:\n"
            f"{out[-_TAIL:]}"
        )
    return result
