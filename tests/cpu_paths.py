"""The fp16 paths of DeepSpeed on CPU, for tests that must cover each on every machine.

DeepSpeed accepts fp16 on a CPU only when oneDNN has native fp16 there (AVX-512 FP16 / AMX);
otherwise the core refuses it, or runs the labelled emulation when asked to. A test never
assumes which CPU it is on: it asks (`NATIVE_FP16_HERE`), and where the CPU has native fp16 it
reaches the other paths by capping oneDNN below it (`WITHOUT_NATIVE_FP16`, set in the
environment of the processes it starts). The cap is real, not a patch: oneDNN then has no fp16
kernels, reports so, and DeepSpeed itself refuses fp16 as it would on an older CPU.
"""

from __future__ import annotations

from accelerate_core.machine import native_cpu_fp16

NATIVE_FP16_HERE = native_cpu_fp16()
WITHOUT_NATIVE_FP16 = {"DNNL_MAX_CPU_ISA": "AVX2"}
NO_NATIVE_FP16_REASON = (
    "this CPU has no native fp16 in oneDNN, so DeepSpeed's native fp16 path cannot run here; "
    "the emulation and refusal paths are tested on every machine"
)


def fp16_path_here() -> str:
    return "native" if NATIVE_FP16_HERE else "emulated"
