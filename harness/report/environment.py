"""Where a run happened: interpreter, package versions, devices, platform.

DeepSpeed's version comes from the installed distribution's metadata, never from importing
it: an import costs seconds and pulls CUDA probing, and a report must not change what it
describes (the nodeepspeed environment must keep deepspeed unimported).
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any

from accelerate_core.machine import describe_machine

NOT_INSTALLED = "not installed"


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return NOT_INSTALLED


def _devices() -> dict[str, Any]:
    import torch  # the harness needs torch anyway; imported here to keep report import cheap

    info: dict[str, Any] = {
        "cpu_count": os.cpu_count() or 0,
        "cuda_available": bool(torch.cuda.is_available()),
        "cuda_device_count": int(torch.cuda.device_count()),
        "cuda_devices": [],
        "torch_cuda": torch.version.cuda or "none",
    }
    for index in range(info["cuda_device_count"]):
        info["cuda_devices"].append(torch.cuda.get_device_name(index))
    return info


def environment_info(env_name: str) -> dict[str, Any]:
    """A JSON-ready description of this environment for report.json and the other reports."""
    deepspeed_version = _version("deepspeed")
    info: dict[str, Any] = {
        "name": env_name,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": platform.node(),
        "torch": _version("torch"),
        "deepspeed": deepspeed_version,
        "deepspeed_installed": deepspeed_version != NOT_INSTALLED,
        "accelerate_core": _version("accelerate-core"),
        "ci": bool(os.environ.get("CI")),
    }
    info.update(_devices())
    # What decides numerics here (CPU model, flags, kernels, BLAS/oneDNN, threads, native
    # fp16/bf16, CUDA versions): a verdict names the machine it was reached on.
    info["machine"] = describe_machine()
    return info
