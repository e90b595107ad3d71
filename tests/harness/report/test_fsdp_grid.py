"""The report grid with the fsdp configurations (cpu2-fsdp, cuda2-fsdp: 450 cells, as the real
matrix has them): report.md's visible grid is cut between launch shapes where one table would be
wider than a job summary's line, every configuration still shown once, within the size, width
and length budgets of test_report_size.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.report.markdown import render_markdown
from tests.harness.report import full_matrix as synthetic
from tests.harness.report.test_report_size import LENGTH, SIZE, WIDTH, visible_lines, widths

WITH_FSDP = ("cpu1-single", "cpu2-ddp", "cpu2-zero1", "cpu2-zero2", "cpu2-zero3", "cpu2-fsdp", "cuda1-single",
             "cuda1-zero1", "cuda1-zero2", "cuda1-zero3", "cuda2-ddp", "cuda2-zero1", "cuda2-zero2",
             "cuda2-zero3", "cuda2-fsdp")


@pytest.fixture
def fsdp_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(synthetic, "SHAPES", WITH_FSDP)


def _grid_headers(text: str) -> list[str]:
    grid = text[text.index("### Grid"): text.index("Folded:")]
    return [line for line in grid.splitlines() if line.startswith("| task |")]


@pytest.mark.usefixtures("fsdp_shapes")
@pytest.mark.parametrize("name", ["deepspeed", "nodeepspeed"])
def test_a_report_with_fsdp_fits_a_job_summary(name: str) -> None:
    if name == "deepspeed":
        results = synthetic.full_matrix(compare_records=Path("/reports/nodeepspeed"))
    else:
        results = synthetic.full_matrix(synthetic.NO_DEEPSPEED_HOST, environment=name)
    assert len(results) == 450
    text = render_markdown(results, {**synthetic.ENVIRONMENT, "name": name})
    assert len(text.encode()) < SIZE
    shown = visible_lines(text)
    assert len(shown) <= LENGTH
    assert not [(w, what) for w, what in widths(shown) if w > WIDTH]
    headers = _grid_headers(text)
    cpu_fsdp = [h for h in headers if "cpu2<br>fsdp<br>bf16" in h]
    assert len(cpu_fsdp) == 1, headers  # every configuration once, fsdp's beside the others
    columns = sum(h.count(" | ") for h in headers)
    # 18 CPU configurations and the folds (deepspeed: the CUDA fold; nodeepspeed: also ZeRO's).
    assert columns == (18 + 1 if name == "deepspeed" else 9 + 2)
    if name == "deepspeed":
        assert len(headers) == 2, "one table would be wider than a job summary's line"


def test_the_grid_without_fsdp_stays_one_table() -> None:
    text = render_markdown(synthetic.full_matrix(), synthetic.ENVIRONMENT)
    assert len(_grid_headers(text)) == 1
