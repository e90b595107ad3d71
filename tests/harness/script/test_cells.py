"""Script cells without a launch: the matrix's backends as the script's cells, each cell's
reference, and the placeholders of the script's arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.plan.cell import STRATEGIES, Cell
from harness.plan.matrix import load_matrix
from harness.script.cells import arguments_for, reference_of, script_cells, script_name


def test_the_cells_are_the_matrix_backends_with_the_script_as_task() -> None:
    matrix = load_matrix()
    cells = script_cells(matrix, "train")
    backends = {(c.device, c.processes, c.strategy, c.precision) for c in matrix.cells}
    assert {(c.device, c.processes, c.strategy, c.precision) for c in cells} == backends
    assert len(cells) == len(backends) and {c.task for c in cells} == {"train"}
    assert script_name(Path("my-Train.v2.py"), None) == "my_train_v2"
    with pytest.raises(UsageError, match="--name"):
        script_name(Path("train.py"), "Bad-Name")


def test_the_reference_follows_the_precision_unless_pinned() -> None:
    cell = Cell.from_id("train-cpu2-zero3-bf16")
    assert reference_of(cell, "cpu1-single").id == "train-cpu1-single-bf16"
    assert reference_of(cell, "cpu1-single-fp32").id == "train-cpu1-single-fp32"
    with pytest.raises(UsageError, match="cpu1-single"):
        reference_of(cell, "single")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_of_the_matrix_can_be_the_reference(strategy: str) -> None:
    cell = Cell.from_id("train-cpu2-zero3-bf16")
    assert reference_of(cell, f"cpu2-{strategy}").id == f"train-cpu2-{strategy}-bf16"  # fsdp included
    with pytest.raises(UsageError, match="not a backend"):
        reference_of(cell, f"cpu2-{strategy}x")


def test_placeholders_are_filled_per_cell(tmp_path: Path) -> None:
    cell = Cell.from_id("train-cpu2-ddp-fp32")
    given = ["--batch-size", "{8/processes}", "--out={cell_dir}/m.pt", "{cell_id}", "{processes}", "{other}"]
    assert arguments_for(given, cell, tmp_path) == [
        "--batch-size", "4", f"--out={tmp_path}/m.pt", "train-cpu2-ddp-fp32", "2", "{other}"]
    with pytest.raises(UsageError, match="does not split over 2 processes"):
        arguments_for(["{7/processes}"], cell, tmp_path)
