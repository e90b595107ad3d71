"""Can this cell run here? If not, a reason code and a sentence a person can act on.

The parent asks once per run (`probe_host`), without importing deepspeed: a skip must be cheap
and must never hide a real failure, so only facts about the host decide it (devices, installed
packages, native fp16), never anything the code under test does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from accelerate_core.imports import DEEPSPEED_INSTALL_HINT, is_deepspeed_available
from harness import implementations
from harness.plan.cell import Cell

# Reason codes (stable: reports and tests key on them).
OK = "ok"
EMULATED = "emulated"
NO_CUDA = "needs_cuda"
FEW_CUDA = "needs_more_cuda_devices"
FEW_CPUS = "needs_more_cpu_cores"
NO_DEEPSPEED = "deepspeed_not_installed"
NO_IMPLEMENTATION = "implementation_not_installed"
FP16_NEEDS_EMULATION = "fp16_needs_emulation"


@dataclass(frozen=True)
class Host:
    """What the machine offers, probed once."""

    cuda_devices: int
    cpu_cores: int
    deepspeed: bool
    # DeepSpeed's CPU accelerator accepts fp16 only when oneDNN has native fp16 on this CPU.
    cpu_native_fp16: bool
    # Run DeepSpeed fp16 on such a CPU through the labelled emulation (README, "DeepSpeed on
    # CPU") instead of skipping.
    allow_cpu_fp16_emulation: bool = True
    # The implementations whose package is installed here (harness.implementations).
    implementations: frozenset[str] = frozenset({"core"})


@dataclass(frozen=True)
class Availability:
    runnable: bool
    code: str
    reason: str = ""
    emulated: bool = False


def probe_host(allow_cpu_fp16_emulation: bool = True) -> Host:
    import torch  # the parent needs torch anyway to compare records

    return Host(
        cuda_devices=torch.cuda.device_count() if torch.cuda.is_available() else 0,
        cpu_cores=os.cpu_count() or 1,
        deepspeed=is_deepspeed_available(),
        cpu_native_fp16=_cpu_native_fp16(),
        allow_cpu_fp16_emulation=allow_cpu_fp16_emulation,
        implementations=frozenset(n for n in implementations.names() if implementations.is_installed(n)),
    )


def _cpu_native_fp16() -> bool:
    # The same test DeepSpeed's CPU_Accelerator.is_fp16_supported() makes, without importing it.
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except (AttributeError, RuntimeError):
        return False


def check(cell: Cell, host: Host) -> Availability:
    """Decide one cell. Order matters: the most basic missing thing is the one reported."""
    if cell.device == "cuda":
        if host.cuda_devices == 0:
            plural = "s" if cell.processes > 1 else ""
            return Availability(False, NO_CUDA, f"needs {cell.processes} CUDA device{plural}, found 0")
        if host.cuda_devices < cell.processes:
            return Availability(
                False, FEW_CUDA, f"needs {cell.processes} CUDA devices, found {host.cuda_devices}"
            )
    elif cell.processes > host.cpu_cores:
        return Availability(
            False,
            FEW_CPUS,
            f"needs {cell.processes} CPU cores for {cell.processes} processes, found {host.cpu_cores}",
        )
    if cell.implementation not in host.implementations:
        known = implementations.KNOWN[cell.implementation]
        return Availability(False, NO_IMPLEMENTATION,
                            f"implementation {cell.implementation!r} is not installed ({known.install_hint})")
    if cell.is_deepspeed and not host.deepspeed:
        return Availability(False, NO_DEEPSPEED, f"deepspeed is not installed ({DEEPSPEED_INSTALL_HINT})")
    if (cell.is_deepspeed and cell.device == "cpu" and cell.precision == "fp16" and not host.cpu_native_fp16
            and cell.implementation == "core"):  # the emulation is the core's (DeepSpeedPlugin)
        if not host.allow_cpu_fp16_emulation:
            return Availability(
                False,
                FP16_NEEDS_EMULATION,
                "fp16 DeepSpeed on this CPU needs emulation (no native fp16 in oneDNN); "
                "run without --no-emulation to run it emulated",
            )
        return Availability(
            True, EMULATED, "fp16 DeepSpeed on this CPU runs through the labelled emulation", emulated=True
        )
    return Availability(True, OK)
