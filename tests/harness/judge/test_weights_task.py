"""Which tolerances judge a cell (harness.judge.cell_verdict): a resumed cell whose source or
destination is a ZeRO cell carries noise the variants behind the per-task tolerances never
measured (half weights handed over, or loaded masters rounded to half), so it keeps the family's;
and a resumed cell whose source is a ZeRO cell is judged by the zero family's, whose noise its
first steps carry."""

from __future__ import annotations

import pytest

from harness.judge.cell_verdict import family_strategy, weights_task
from harness.plan.cell import PRECISIONS, Cell
from harness.plan.matrix import load_matrix
from harness.plan.tolerances import QUANTITY_KINDS


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


def test_a_resume_from_a_zero_source_is_judged_by_the_zero_family() -> None:
    assert family_strategy(Cell.from_id("lm-cpu2-zero3-bf16:cpu2-ddp-bf16")) == "zero3"
    assert family_strategy(Cell.from_id("lm-cpu2-zero1-fp16:cpu2-fsdp-fp16")) == "zero1"
    assert family_strategy(Cell.from_id("lm-cpu2-zero2-fp32:cpu1-single-fp32")) == "zero2"


def test_every_other_cell_is_judged_by_its_own_strategys_family() -> None:
    assert family_strategy(Cell.from_id("lm-cpu2-ddp-bf16")) == "ddp"
    assert family_strategy(Cell.from_id("lm-cpu2-zero3-bf16")) == "zero3"
    assert family_strategy(Cell.from_id("lm-golden-bf16:cpu2-ddp-bf16")) == "ddp"
    assert family_strategy(Cell.from_id("lm-cpu2-ddp-bf16:cpu2-zero3-bf16")) == "zero3"
    assert family_strategy(Cell.from_id("lm-cpu2-fsdp-bf16:cpu1-single-bf16")) == "single"


@pytest.mark.parametrize("precision", PRECISIONS)
def test_each_zero_entry_is_at_least_its_plain_twin_so_the_zero_end_is_the_wider(precision: str) -> None:
    """family_strategy picks the zero end as the wider tolerance of the two: that holds only while
    every zero entry, per kind of quantity, allows at least what its plain twin allows."""
    table = load_matrix().tolerances
    plain, zero = table.for_strategy(precision, "ddp"), table.for_strategy(precision, "zero3")
    for kind in QUANTITY_KINDS:
        wide, narrow = zero.for_quantity(kind), plain.for_quantity(kind)
        assert wide.atol >= narrow.atol and wide.rtol >= narrow.rtol, (
            f"{precision} {kind}: zero atol/rtol {wide.atol}/{wide.rtol} is narrower than plain's "
            f"{narrow.atol}/{narrow.rtol}")
