"""One marker factory for the conditions a test needs from the machine it runs on.

    @run_if(deepspeed=True)                  skipped where deepspeed is not installed
    @run_if(native_fp16=True)                skipped on a CPU without native fp16 in oneDNN
    @run_if(min_cuda_gpus=2)                 skipped with fewer CUDA devices
    pytestmark = [run_if(deepspeed=True, why="the cpu2 cells before the target run ZeRO")]

Each returns a plain `pytest.mark.skipif(<bool>, reason=...)`: the condition is evaluated here,
once, when the test module is imported (tests/accelerate_core/shared_launch.py reads it to leave a
skipped module's launch out), and the reason says what is missing on this machine and how to get
it. True asks for the thing, False for its absence; None (the default) does not care. Several
conditions: the test runs only where all hold, and the reason names every one that does not.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from accelerate_core.imports import DEEPSPEED_INSTALL_HINT, is_deepspeed_available

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Condition:
    """One thing a test may need: whether this machine has it, and what to say when it does not."""

    name: str
    here: bool
    missing: str  # why a test that needs it skips, with how to get it
    present: str  # why a test that needs its absence skips


def _deepspeed() -> Condition:
    return Condition("deepspeed", is_deepspeed_available(),
                     f"deepspeed is not installed (install it: {DEEPSPEED_INSTALL_HINT})",
                     "deepspeed is installed (this test needs an environment without it: "
                     "nox -s 'tests(nodeepspeed)')")


def _native_fp16() -> Condition:
    from tests.cpu_paths import NATIVE_FP16_HERE, NO_NATIVE_FP16_REASON

    return Condition("native_fp16", NATIVE_FP16_HERE, NO_NATIVE_FP16_REASON,
                     "this CPU has native fp16 in oneDNN (cap it with DNNL_MAX_CPU_ISA=AVX2 to run this "
                     "test here)")


def _cuda() -> Condition:
    import torch

    return Condition("cuda", torch.cuda.is_available(),
                     "no CUDA device (torch.cuda.is_available() is False: needs an NVIDIA GPU and a CUDA "
                     "build of torch)", "a CUDA device is available (this test needs a machine without one)")


def screenshot_script() -> ModuleType:
    """benchmarks/screenshot_report.py (not a package): its browser search is the one to ask."""
    path = REPO_ROOT / "benchmarks" / "screenshot_report.py"
    spec = importlib.util.spec_from_file_location("screenshot_report", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _chromium() -> Condition:
    script = screenshot_script()
    found = script.find_browser(None)
    return Condition("chromium", found is not None,
                     f"no headless Chromium on PATH (tried {', '.join(script.BROWSERS)}): "
                     "`apt-get install -y chromium` to run this test",
                     f"a Chromium is on PATH ({found}; this test needs a machine without one)")


def _linux() -> Condition:
    return Condition("linux", sys.platform.startswith("linux"),
                     f"Linux only (this is {sys.platform}): run it on Linux",
                     "not on Linux (this test covers other platforms)")


def _cuda_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run_if(*, deepspeed: bool | None = None, native_fp16: bool | None = None, cuda: bool | None = None,
           min_cuda_gpus: int = 0, chromium: bool | None = None, linux: bool | None = None,
           why: str = "") -> pytest.MarkDecorator:
    """`pytest.mark.skipif` for the conditions given (see the module docstring); `why` is added to
    the reason: what the test would have covered."""
    asked = ((deepspeed, _deepspeed), (native_fp16, _native_fp16), (cuda, _cuda), (chromium, _chromium),
             (linux, _linux))
    reasons = []
    for wanted, condition in asked:
        if wanted is None:
            continue
        found = condition()
        if found.here != wanted:
            reasons.append(found.missing if wanted else found.present)
    if min_cuda_gpus:
        gpus = _cuda_gpus()
        if gpus < min_cuda_gpus:
            reasons.append(f"needs {min_cuda_gpus} CUDA device{'s' if min_cuda_gpus > 1 else ''}, found "
                           f"{gpus} (a machine with {min_cuda_gpus} NVIDIA GPUs and a CUDA build of torch)")
    if not reasons:
        return pytest.mark.skipif(False, reason="every condition holds here")
    reason = "; ".join(reasons)
    return pytest.mark.skipif(True, reason=f"{reason} - {why}" if why else reason)
