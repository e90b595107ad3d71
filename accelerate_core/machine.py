"""What decides numerics on this machine: the CPU and its flags, torch's kernel choice, the BLAS
and oneDNN builds, thread counts, native fp16/bf16 support, and the CUDA devices.

One description, used by `accelerate-core env`, by report.json's environment block and by the
metadata of every golden, so that a verdict always says which machine it was made on. Two runs
on different CPUs may differ in the last bits of fp32 (other vector widths sum in another
order) and DeepSpeed accepts fp16 on a CPU only when oneDNN has native fp16 there: both are
facts about the machine, recorded here rather than assumed.

Nothing here imports deepspeed: its CPU accelerator's fp16 answer is the oneDNN probe below
(`CPU_Accelerator.is_fp16_supported`), and its bf16 answer on CPU is always yes.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

# The CPU flags that change which kernels run (vector width, native half/bfloat16, AMX tiles).
NUMERIC_CPU_FLAGS = ("avx2", "avx512f", "avx512_fp16", "avx512_bf16", "amx_bf16")
# Environment variables that change kernel choice or threading when set before torch starts.
NUMERIC_ENVIRONMENT = (
    "ATEN_CPU_CAPABILITY",
    "DNNL_MAX_CPU_ISA",
    "ONEDNN_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_CBWR",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
UNKNOWN = "unknown"


def cpu_model_and_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, set[str] | None]:
    """The CPU's model name and its flags; flags are None where the OS does not list them
    (not Linux, or a restricted /proc), which is recorded as unknown rather than as absent."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return platform.processor() or UNKNOWN, None
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.MULTILINE)
    return (
        model.group(1).strip() if model else (platform.processor() or UNKNOWN),
        set(flags.group(1).split()) if flags else None,
    )


def _onednn_native(probe: str) -> bool | None:
    import torch

    try:
        return bool(getattr(torch.ops.mkldnn, probe)())
    except (AttributeError, RuntimeError):
        return None


def native_cpu_fp16() -> bool:
    """oneDNN has native fp16 on this CPU: exactly what DeepSpeed's CPU accelerator asks before it
    accepts fp16. False under `DNNL_MAX_CPU_ISA=AVX2` even on a CPU that has it (the cap is real:
    oneDNN then runs no AVX-512 fp16 kernel), which is how tests make a newer CPU look older."""
    return bool(_onednn_native("_is_mkldnn_fp16_supported"))


def _build_line(config: str, pattern: str) -> str:
    found = re.search(pattern, config)
    return found.group(1).strip() if found else UNKNOWN


def cpu_description() -> dict[str, Any]:
    import torch

    model, flags = cpu_model_and_flags()
    config = torch.__config__.show()
    return {
        "model": model,
        "architecture": platform.machine(),
        "logical_cores": os.cpu_count() or 0,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "flags": {flag: (None if flags is None else flag in flags) for flag in NUMERIC_CPU_FLAGS},
        "blas": _build_line(config, r"BLAS_INFO=([^,\s]+)"),
        "mkl": _build_line(config, r"Math Kernel Library Version ([\d.]+)") if "BLAS_INFO=mkl" in config
        else "not used",
        "onednn": _build_line(config, r"Intel\(R\) MKL-DNN (v[\d.]+)") if torch.backends.mkldnn.is_available()
        else "not built",
        "onednn_enabled": bool(torch.backends.mkldnn.enabled),
        "intra_op_threads": torch.get_num_threads(),
        "inter_op_threads": torch.get_num_interop_threads(),
        "native_fp16": native_cpu_fp16(),
        "native_bf16": bool(_onednn_native("_is_mkldnn_bf16_supported")),
        # DeepSpeed's CPU accelerator: fp16 only with native oneDNN fp16; bf16 always.
        "deepspeed_cpu_fp16": native_cpu_fp16(),
        "deepspeed_cpu_bf16": True,
    }


def cuda_description() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "available": bool(torch.cuda.is_available()),
        "torch_cuda": torch.version.cuda or "none (CPU build)",
        "devices": [],
    }
    if not info["available"]:
        return info
    info["cudnn"] = str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else "none"
    try:
        info["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
    except (AttributeError, RuntimeError):
        info["nccl"] = "none"
    for index in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(index)
        info["devices"].append({"name": torch.cuda.get_device_name(index), "capability": f"{major}.{minor}"})
    return info


def describe_machine() -> dict[str, Any]:
    """A JSON-ready description of what decides numerics here (see the module docstring)."""
    return {
        "cpu": cpu_description(),
        "cuda": cuda_description(),
        "environment": {name: os.environ[name] for name in NUMERIC_ENVIRONMENT if name in os.environ},
    }
