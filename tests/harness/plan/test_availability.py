"""Run or skip, with a reason code and a sentence: decided from facts about the host only."""

from __future__ import annotations

import os

import pytest

from harness.plan import availability as av
from harness.plan.availability import Host, check, probe_host
from harness.plan.cell import Cell

# Its outcome depends on whether deepspeed is installed: tests(nodeepspeed) runs it too.
# Touches numerics or fp16 detection: nox's older-CPU pass runs it again (marker `numerics`).
pytestmark = [pytest.mark.nodeepspeed, pytest.mark.numerics]

CPU_HOST = Host(cuda_devices=0, cpu_cores=2, deepspeed=True, cpu_native_fp16=False)


def cell(cell_id: str) -> Cell:
    return Cell.from_id(cell_id)


@pytest.mark.parametrize(
    ("cell_id", "host", "code", "sentence"),
    [
        ("lm-cuda1-single-fp32", CPU_HOST, av.NO_CUDA, "needs 1 CUDA device, found 0"),
        ("lm-cuda2-ddp-fp32", CPU_HOST, av.NO_CUDA, "needs 2 CUDA devices, found 0"),
        ("lm-cuda2-zero3-bf16", Host(1, 2, True, False), av.FEW_CUDA, "needs 2 CUDA devices, found 1"),
        (
            "lm-cpu2-ddp-fp32",
            Host(0, 1, True, False),
            av.FEW_CPUS,
            "needs 2 CPU cores for 2 processes, found 1",
        ),
        ("lm-cpu2-zero2-fp32", Host(0, 2, False, False), av.NO_DEEPSPEED, "deepspeed is not installed"),
        ("lm-cuda1-zero2-fp32", Host(1, 2, False, False), av.NO_DEEPSPEED, "deepspeed is not installed"),
        (
            "lm-cpu2-zero1-fp16",
            Host(0, 2, True, False, allow_cpu_fp16_emulation=False),
            av.FP16_NEEDS_EMULATION,
            "fp16 DeepSpeed on this CPU needs emulation",
        ),
    ],
)
def test_skips_say_why(cell_id: str, host: Host, code: str, sentence: str) -> None:
    verdict = check(cell(cell_id), host)
    assert not verdict.runnable
    assert verdict.code == code
    assert sentence in verdict.reason


def test_deepspeed_absent_names_the_install_command() -> None:
    verdict = check(cell("lm-cpu2-zero3-bf16"), Host(0, 2, False, False))
    assert "pip install deepspeed" in verdict.reason


def test_cpu_fp16_deepspeed_runs_emulated_and_labelled() -> None:
    verdict = check(cell("lm-cpu2-zero3-fp16"), CPU_HOST)
    assert verdict.runnable and verdict.emulated and verdict.code == av.EMULATED
    native = check(cell("lm-cpu2-zero3-fp16"), Host(0, 2, True, True))
    assert native.runnable and not native.emulated


@pytest.mark.parametrize("cell_id", ["lm-cpu1-single-fp16", "lm-cpu2-ddp-fp16", "lm-cpu2-zero2-bf16"])
def test_runnable_cells_are_not_emulated(cell_id: str) -> None:
    verdict = check(cell(cell_id), CPU_HOST)
    assert verdict.runnable and not verdict.emulated and verdict.code == av.OK


def test_probe_reports_this_machine() -> None:
    import torch

    from accelerate_core.imports import is_deepspeed_available

    host = probe_host()
    assert host.cpu_cores == (os.cpu_count() or 1)
    assert host.cuda_devices == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert host.deepspeed == is_deepspeed_available()
