"""A cell's record does not depend on which cells ran before it in the same launch.

Cells share their launch's processes (the process group, imported modules, DeepSpeed's
engine set-up, the collector's frozen objects: harness/rank/worker.py), which is what makes a
matrix fast. Here each target cell runs once alone (its own launch) and once last, after a cell
of every other kind of its launch shape (every strategy and precision, other tasks), and the two
records must be the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.judge.outcome import Status
from harness.plan.cell import Cell
from harness.run.runner import RunOptions, run_cells
from tests.run_if import run_if

# One target per launch shape, and before it one cell of every other kind of that shape.
TARGETS = {
    "classifier-cpu2-zero3-bf16": [
        "regression-cpu2-ddp-fp32", "lm-cpu2-zero1-bf16", "clip_norm-cpu2-zero2-fp32",
        "sgd_accum-cpu2-zero3-fp32", "root_param-cpu2-ddp-bf16", "classifier-cpu2-zero1-fp32",
        "lm-cpu2-ddp-fp16",
    ],
    "lm-cpu1-single-fp16": [
        "regression-cpu1-single-fp32", "classifier-cpu1-single-bf16", "clip_norm-cpu1-single-fp16",
        "batchnorm-cpu1-single-fp32",
    ],
}

pytestmark = [
    pytest.mark.slow,
    run_if(deepspeed=True, why="the cpu2 cells before the target run ZeRO"),
]


def _record_bytes(report_dir: Path, cell_id: str) -> bytes:
    return (report_dir / "records" / f"{cell_id}.safetensors").read_bytes()


def test_a_cell_alone_and_after_every_other_kind_gives_the_same_record(tmp_path: Path) -> None:
    alone = tmp_path / "alone"
    after = tmp_path / "after"
    targets = [Cell.from_id(cell_id) for cell_id in TARGETS]
    for result in run_cells(targets, RunOptions(alone, timeout_s=120, isolate=True)):
        assert result.status == Status.PASSED, result.reason
    preceded = [Cell.from_id(cell_id) for target, before in TARGETS.items() for cell_id in [*before, target]]
    results = {r.id: r for r in run_cells(preceded, RunOptions(after, timeout_s=120))}
    for target in TARGETS:
        assert results[target].status == Status.PASSED, results[target].reason
        assert _record_bytes(alone, target) == _record_bytes(after, target), (
            f"{target}: its record after {TARGETS[target]} differs from its record alone")
