"""Run a script on N real processes through `python -m torch.distributed.run` (no mocks).

Shared by the core's, the DeepSpeed and the CLI tests. The rendezvous is torchrun's
--standalone one (a port the kernel picks); a run that fails or times out raises with the tail
of its output, and a timed-out run has the launcher and every rank killed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parent.parent
_TAIL = 6000


class DistributedRunError(RuntimeError):
    """A distributed run exited non-zero or ran past its timeout; `output` is all it printed."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


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
        # --standalone: a c10d rendezvous on a port the kernel picks and torchrun holds, so
        # launches running side by side (pytest-xdist) never race for a port.
        "--standalone", "--nproc_per_node", str(nproc),
        str(script), *(args or []),
    ]
    proc = subprocess.Popen(
        command, env=full_env, cwd=str(REPO_ROOT), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # torchrun starts each rank in a session of its own, so killing the launcher's process
        # group would leave the ranks behind: list every descendant first, then kill them all.
        launcher = psutil.Process(proc.pid)
        processes = [launcher, *launcher.children(recursive=True)]
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(processes, timeout=10)
        out, _ = proc.communicate()
        raise DistributedRunError(
            f"{script.name} on {nproc} processes timed out after {timeout:.0f}s; output tail:\n"
            f"{out[-_TAIL:]}", output=out
        ) from None
    result = subprocess.CompletedProcess(command, proc.returncode, out, "")
    if proc.returncode != 0:
        raise DistributedRunError(
            f"{script.name} on {nproc} processes exited with {proc.returncode}; output tail:\n"
            f"{out[-_TAIL:]}", output=out
        )
    return result
