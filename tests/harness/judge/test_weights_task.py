"""Which cells' final weights get their task's own weight tolerance (harness.judge.cell_verdict):
a resumed cell whose source is a ZeRO cell carries half-weight noise the plain variants behind
those tolerances never measured, so it keeps the family's."""

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
