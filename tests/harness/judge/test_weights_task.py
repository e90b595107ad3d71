"""Which cells get their task's own tolerances (harness.judge.cell_verdict): a resumed cell whose
source or destination is a ZeRO cell carries noise the variants behind those tolerances never
measured (half weights handed over, or loaded masters rounded to half), so it keeps the family's."""

from __future__ import annotations

from harness.judge.cell_verdict import weights_task
from harness.plan.cell import Cell


def test_a_plain_cell_and_a_resume_from_a_plain_source_get_the_tasks_tolerance() -> None:
    assert weights_task(Cell.from_id("lm-cpu2-ddp-bf16"), "lm") == "lm"
    assert weights_task(Cell.from_id("lm-golden-bf16:cpu2-fsdp-bf16"), "lm") == "lm"
    assert weights_task(Cell.from_id("lm-cpu2-fsdp-bf16:cpu2-ddp-bf16"), "lm") == "lm"


def test_a_resume_from_a_zero_source_keeps_the_familys() -> None:
    assert weights_task(Cell.from_id("lm-cpu2-zero3-bf16:cpu2-ddp-bf16"), "lm") is None
    assert weights_task(Cell.from_id("lm-cpu2-zero1-bf16:cpu1-single-bf16"), "lm") is None


def test_a_zero_cell_gets_its_tasks_tolerance_but_a_resume_into_zero_keeps_the_familys() -> None:
    # A ZeRO cell's half semantics are what the zero family's entries measured; a resume into a
    # ZeRO destination rounds the loaded masters to half at the resume step, which they did not.
    assert weights_task(Cell.from_id("lm-cpu2-zero2-bf16"), "lm") == "lm"
    assert weights_task(Cell.from_id("lm-golden-bf16:cpu2-zero3-bf16"), "lm") is None
    assert weights_task(Cell.from_id("lm-cpu2-ddp-bf16:cpu2-zero1-bf16"), "lm") is None
    assert weights_task(Cell.from_id("lm-cpu2-zero3-bf16:cpu2-zero3-bf16"), "lm") is None


def test_a_gpu_cell_keeps_the_familys_since_the_entries_were_measured_with_cpu_kernels() -> None:
    assert weights_task(Cell.from_id("lm-cuda1-single-bf16"), "lm") is None
    assert weights_task(Cell.from_id("lm-cuda2-zero2-bf16"), "lm") is None
    assert weights_task(Cell.from_id("lm-cpu1-single-bf16"), "lm") == "lm"
