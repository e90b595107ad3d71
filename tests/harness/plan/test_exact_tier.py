"""[[exact_tier]] entries of matrix.toml: what they cover, and the mistakes refused at load."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import MatrixError
from harness.paths import MATRIX_PATH
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix


def _matrix_with(tmp_path: Path, entry: str) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(MATRIX_PATH.read_text(encoding="utf-8") + "\n" + entry, encoding="utf-8")
    return path


ENTRY = ('[[exact_tier]]\ntask = ["regression"]\nstrategy = ["single", "ddp"]\nenvironments = ["t"]\n'
         'reason = "measured bit-identical here, for this test"\n')


def test_an_entry_covers_its_fp32_cpu_core_cells_in_its_environments(tmp_path: Path) -> None:
    matrix = load_matrix(_matrix_with(tmp_path, ENTRY))
    covered = [tier for tier in matrix.exact_tiers if "for this test" in tier.reason]
    assert len(covered) == 1
    assert matrix.judged_exactly(Cell.from_id("regression-cpu2-ddp-fp32"), "t")
    assert not matrix.judged_exactly(Cell.from_id("regression-cpu2-ddp-fp32"), "other")
    assert not matrix.judged_exactly(Cell.from_id("regression-cpu2-ddp-bf16"), "t")
    assert not matrix.judged_exactly(Cell.from_id("regression-cpu2-zero3-fp32"), "t")
    assert not matrix.judged_exactly(Cell.from_id("regression-cuda2-ddp-fp32"), "t")
    assert not matrix.judged_exactly(Cell.from_id("classifier-cpu1-single-fp32"), "t")


def test_the_repository_matrix_keeps_resume_pairs_and_half_precision_out() -> None:
    matrix = load_matrix()
    for cell in matrix.resume_cells:
        assert not matrix.judged_exactly(cell, "deepspeed")
    for cell in matrix.all_cells():
        if matrix.judged_exactly(cell, "deepspeed"):
            assert cell.precision == "fp32" and cell.device == "cpu" and cell.implementation == "core"


@pytest.mark.parametrize(("line", "message"), [
    ('precision = ["bf16"]\n', "the exact tier holds fp32 cells only"),
    ('device = ["cuda"]\n', "the exact tier holds cpu cells only"),
    ('environments = "deepspeed"\n', "it must be a list of environment names"),
    ('colour = "blue"\n', "it is not a known key"),
])
def test_a_wrong_entry_is_refused_at_load_with_the_fix(tmp_path: Path, line: str, message: str) -> None:
    entry = ('[[exact_tier]]\ntask = ["regression"]\nreason = "a sentence long enough"\n' + line)
    with pytest.raises(MatrixError, match=message) as raised:
        load_matrix(_matrix_with(tmp_path, entry))
    assert "[[exact_tier]]" in str(raised.value) and "Fix:" in str(raised.value)


def test_an_entry_needs_a_reason(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match="reason"):
        load_matrix(_matrix_with(tmp_path, '[[exact_tier]]\ntask = ["regression"]\n'))
