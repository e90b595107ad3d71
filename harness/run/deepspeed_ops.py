"""DeepSpeed's one-off JIT build of its CPU comm op, paid once per machine before any launch.

The first DeepSpeed engine started on a CPU compiles the shared-memory comm op (60-90 s on an
idle machine, minutes on a busy one; needs ninja and g++) and caches it under
`TORCH_EXTENSIONS_DIR` (default `~/.cache/torch_extensions/py311_cpu/`). Built inside a cell, it
ate most of that cell's --timeout; built inside a launch's start-up, a slow build could outlast
the start-up grace and be killed, leaving torch's build lock behind, on which every later build
waits forever. So the runner builds it here, in a child process, before the first launch of a
group with DeepSpeed CPU cells, with a limit of its own; the time is reported as start-up.

When the built op is already in the cache this costs nothing (no child, no import of
deepspeed): the launches' warm-up loads it (harness.rank.worker.build_deepspeed_cpu_ops), and
rebuilds it there, still outside any cell's clock, in the rare case the cached one is stale.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

OP_NAME = "deepspeed_shm_comm"
BUILD_LIMIT_S = 1800.0
_BUILD = "from harness.rank.worker import build_deepspeed_cpu_ops; build_deepspeed_cpu_ops()"


def build_directory(env: dict[str, str]) -> Path:
    """Where torch's extension loader builds the op in a process with `env` (the same rule as
    torch.utils.cpp_extension: TORCH_EXTENSIONS_DIR as is, else the user cache + py/accelerator)."""
    import torch
    from torch.utils.cpp_extension import get_default_build_root

    root = env.get("TORCH_EXTENSIONS_DIR")
    if root is not None:
        return Path(root) / OP_NAME
    accelerator = "cpu" if torch.version.cuda is None else f"cu{torch.version.cuda.replace('.', '')}"
    if torch.version.hip is not None:
        accelerator = f"rocm{torch.version.hip.replace('.', '')}"
    python = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    return Path(get_default_build_root()) / f"{python}_{accelerator}" / OP_NAME


def ensure_deepspeed_ops(env: dict[str, str], limit_s: float = BUILD_LIMIT_S) -> dict[str, object]:
    """Build the op unless it is cached; what happened, for the start-up report."""
    folder = build_directory(env)
    if (folder / f"{OP_NAME}.so").exists() and not (folder / "lock").exists():
        return {"launch": "deepspeed-ops", "cached": True, "startup_s": 0.0}
    start = time.perf_counter()
    entry: dict[str, object] = {"launch": "deepspeed-ops", "cached": False}
    try:
        done = subprocess.run([sys.executable, "-c", _BUILD], env=env, capture_output=True, text=True,
                              timeout=limit_s, cwd=os.getcwd(), check=False)
        if done.returncode != 0:
            entry["error"] = (done.stdout + done.stderr).strip()[-2000:]
    except subprocess.TimeoutExpired:
        # Our build held torch's lock: remove it, or every later build waits for it forever.
        (folder / "lock").unlink(missing_ok=True)
        entry["error"] = f"not built within {limit_s:.0f} s"
    seconds = round(time.perf_counter() - start, 3)
    entry.update(startup_s=seconds, deepspeed_ops_s=seconds)
    return entry
