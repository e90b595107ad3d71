"""Choosing DeepSpeed's accelerator, including the opt-in fp16 emulation on CPU.

DeepSpeed refuses fp16 on a CPU whose oneDNN has no native fp16 ("Type fp16 is not supported on
your device."). Its public `deepspeed.accelerator.set_accelerator()` accepts a subclass of
`CPU_Accelerator` that reports fp16 as supported; torch then runs the fp16 kernels in software.
The numbers are real fp16 arithmetic, but the speed and the kernels are not what a native fp16
device would use, so a run made this way is an emulation and is labelled as such.

Everything here imports deepspeed inside functions only.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import torch

from accelerate_core.errors import UnsupportedObjectError, UnsupportedPrecisionError, explain


def prepare_accelerator_choice(device: torch.device) -> None:
    """Before deepspeed is first imported: make it pick the CPU accelerator for a CPU run
    (otherwise it probes for CUDA and other devices and warns)."""
    if device.type == "cpu" and "deepspeed" not in sys.modules:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


@dataclass
class AcceleratorSwap:
    """What `select_accelerator` changed, so `restore` can put it back at teardown."""

    previous: Any
    emulated: bool

    def restore(self) -> None:
        from deepspeed.accelerator import set_accelerator

        if self.previous is not None:
            set_accelerator(self.previous)


def _emulating_cpu_accelerator_class() -> type:
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    class EmulatedFP16CPUAccelerator(CPU_Accelerator):
        """The CPU accelerator, reporting fp16 as supported (the opt-in emulation)."""

        def is_fp16_supported(self) -> bool:
            return True

        def supported_dtypes(self) -> list[torch.dtype]:
            return [torch.float, torch.bfloat16, torch.float16]

    return EmulatedFP16CPUAccelerator


def native_cpu_fp16_supported() -> bool:
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    return bool(CPU_Accelerator().is_fp16_supported())


def select_accelerator(device: torch.device, mixed_precision: str, allow_emulation: bool) -> AcceleratorSwap:
    """Make DeepSpeed's global accelerator match `device`; for fp16 on a CPU without native
    support, refuse clearly unless the emulation was opted into."""
    from deepspeed.accelerator import get_accelerator, set_accelerator

    current = get_accelerator()
    if device.type == "cuda":
        if current.device_name() == "cuda":
            return AcceleratorSwap(previous=None, emulated=False)
        # An earlier CPU run in this process (or DS_ACCELERATOR=cpu) chose the CPU accelerator.
        from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator

        set_accelerator(CUDA_Accelerator())
        return AcceleratorSwap(previous=current, emulated=False)
    if device.type != "cpu":
        raise UnsupportedObjectError(
            explain(
                f"a DeepSpeed run on device {device}",
                "the core runs DeepSpeed on CPU and CUDA only",
                "cpu, cuda",
                "use Accelerator(cpu=True) or a CUDA machine",
            )
        )

    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    emulated = False
    wanted: Any = current if isinstance(current, CPU_Accelerator) else CPU_Accelerator()
    if mixed_precision == "fp16" and not native_cpu_fp16_supported():
        if not allow_emulation:
            raise UnsupportedPrecisionError(
                explain(
                    "DeepSpeed with mixed_precision='fp16' on CPU",
                    "this CPU has no native fp16 support in oneDNN, so DeepSpeed refuses fp16 "
                    "('Type fp16 is not supported on your device.')",
                    "mixed_precision='bf16' or 'no' on this CPU; fp16 on a GPU or on a CPU with "
                    "native fp16",
                    "use bf16, or opt in to the labelled software emulation with "
                    "DeepSpeedPlugin(cpu_fp16_emulation=True) (launcher: --cpu-fp16-emulation)",
                )
            )
        wanted = _emulating_cpu_accelerator_class()()
        emulated = True
    elif type(current) is not CPU_Accelerator and isinstance(current, CPU_Accelerator):
        # A previous emulated run left its accelerator installed; use the plain one again.
        wanted = CPU_Accelerator()
    if wanted is current:
        return AcceleratorSwap(previous=None, emulated=False)
    set_accelerator(wanted)
    return AcceleratorSwap(previous=current, emulated=emulated)
