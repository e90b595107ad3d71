"""fsdp in the matrix: on every launch shape with more than one process (CPU and CUDA), every
task and precision; marked `fsdp` (never `deepspeed`), runnable where deepspeed is absent, so the
nodeepspeed CI job runs them; the fsdp cells that raise in the core are declared with how."""

from __future__ import annotations

import pytest

from harness.cli.ci import _markexpr
from harness.plan.availability import OK, Host, check
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.plan.selection import select

# Its outcome depends on whether deepspeed is installed: tests(nodeepspeed) runs it too.
pytestmark = pytest.mark.nodeepspeed


def test_fsdp_runs_on_every_multi_process_shape_for_every_task_and_precision() -> None:
    matrix = load_matrix()
    fsdp = {c.id for c in matrix.cells if c.strategy == "fsdp" and c.implementation == "core"}
    shapes = {(c.device, c.processes) for c in matrix.cells}
    multi = sorted((d, p) for d, p in shapes if p > 1)
    assert multi, "the matrix has no multi-process shape"
    wanted = {f"{t}-{d}{p}-fsdp-{pr}" for t in matrix.axis("task") for d, p in multi
              for pr in matrix.axis("precision")}
    assert fsdp == wanted
    assert not any(c.strategy == "fsdp" and c.processes == 1 for c in matrix.all_cells())
    assert "classifier-cpu2-fsdp-bf16" in fsdp


def test_fsdp_cell_ids_round_trip_and_carry_the_fsdp_marker() -> None:
    cell = Cell.from_id("classifier-cpu2-fsdp-bf16")
    assert (cell.strategy, cell.is_fsdp, cell.is_deepspeed, cell.zero_stage) == ("fsdp", True, False, None)
    assert cell.markers == ("matrix", "fsdp", "bf16")
    assert Cell.from_id("lm-cuda2-fsdp-fp32").markers == ("matrix", "fsdp", "multi_gpu")
    assert [c.id for c in select([cell, Cell.from_id("classifier-cpu2-ddp-bf16")], None, "fsdp")] == [cell.id]


def test_fsdp_cells_run_where_deepspeed_is_absent() -> None:
    no_deepspeed = Host(cuda_devices=0, cpu_cores=2, deepspeed=False, cpu_native_fp16=False)
    for precision in ("fp32", "fp16", "bf16"):
        assert check(Cell("classifier", "cpu", 2, "fsdp", precision), no_deepspeed).code == OK
    matrix = load_matrix()
    env = matrix.environments["nodeepspeed"]
    selected = select(matrix.cells, None, _markexpr(env))
    assert {c.id for c in matrix.cells if c.is_fsdp and c.device == "cpu"} <= {c.id for c in selected}


@pytest.mark.parametrize(("cell_id", "status", "words"), [
    ("scalar-cuda2-fsdp-bf16", "exception", "scalar parameters"),
    # Under a half policy BatchNorm runs (its own fp32 unit): plain BatchNorm fails as under DDP.
    ("batchnorm-cpu2-fsdp-fp16", "failed", "per-rank batch statistics"),
    ("batchnorm-cpu2-fsdp-fp32", "failed", "per-rank batch statistics"),
    ("dropout-cpu2-fsdp-bf16", "failed", "draws random numbers"),
])
def test_fsdp_cells_that_cannot_match_are_declared_with_how_they_fail(cell_id: str, status: str,
                                                                     words: str) -> None:
    expected = load_matrix().expected_outcome(Cell.from_id(cell_id))
    assert expected is not None and expected.status == status
    assert expected.diagnosis is not None and words in expected.diagnosis.pattern


def test_fsdp_cells_of_other_tasks_are_expected_to_pass() -> None:
    matrix = load_matrix()
    for task in ("regression", "classifier", "lm", "root_param", "sgd_accum", "clip_norm", "batchnorm_sync"):
        for precision in ("fp32", "fp16", "bf16"):  # tied weights and BatchNorm included
            assert matrix.expected_outcome(Cell(task, "cpu", 2, "fsdp", precision)) is None, (task, precision)
