"""matrix.toml -> cells, exclusions, expected outcomes, environments; -k / -m selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.plan.cell import Cell
from harness.plan.matrix import MatrixError, load_matrix
from harness.plan.matrix import load_matrix as load_with_tasks
from harness.plan.selection import SelectionError, opt_in_requested, select
from tests.harness.runner_helpers import SMALL_MATRIX, write_matrix

TASKS = ["regression", "classifier", "lm"]


def test_repository_matrix_loads_and_every_cell_id_round_trips() -> None:
    matrix = load_matrix()
    assert {"deepspeed", "nodeepspeed"} <= set(matrix.environments)
    assert matrix.environments["nodeepspeed"].deepspeed is False
    for cell in matrix.all_cells():
        assert Cell.from_id(cell.id) == cell
    assert all(cell.task.startswith("canary") for cell, _ in matrix.opt_in_cells)
    assert not any(cell.task.startswith("canary") for cell in matrix.cells)


def test_repository_matrix_has_at_least_40_cpu_cells_when_three_tasks_are_listed() -> None:
    matrix = load_matrix()
    tasks = matrix.axis("task")
    if len(tasks) < 3:
        pytest.skip(f"task axis lists {tasks}; the count target needs 3 tasks")
    cpu = [c for c in matrix.cells if c.device == "cpu"]
    assert len(cpu) >= 40
    assert {c.strategy for c in cpu} == {"single", "ddp", "zero1", "zero2", "zero3", "fsdp"}


def test_product_of_axes_and_shapes(tmp_path: Path) -> None:
    matrix = load_with_tasks(write_matrix(tmp_path), known_tasks=TASKS)
    assert [c.id for c in matrix.cells] == [
        "regression-cpu1-single-fp32",
        "regression-cpu2-ddp-fp32",
        "regression-cuda2-ddp-fp32",
    ]


def test_exclusion_removes_cells_and_keeps_its_reason(tmp_path: Path) -> None:
    extra = '\n[[exclude]]\ndevice = "cuda"\nreason = "no cuda runner for this test matrix"\n'
    matrix = load_with_tasks(write_matrix(tmp_path, extra=extra), known_tasks=TASKS)
    assert all(c.device == "cpu" for c in matrix.cells)
    assert matrix.excluded == [
        (Cell.from_id("regression-cuda2-ddp-fp32"), "no cuda runner for this test matrix")
    ]


def test_exclusion_without_reason_is_refused(tmp_path: Path) -> None:
    path = write_matrix(tmp_path, extra='\n[[exclude]]\ndevice = "cuda"\n')
    with pytest.raises(MatrixError, match=r"needs a reason.*Fix:"):
        load_with_tasks(path, known_tasks=TASKS)


def test_expected_outcome_matches_by_axes_and_environment(tmp_path: Path) -> None:
    extra = (
        '\n[[expected]]\nstrategy = "ddp"\nstatus = "failed"\nmatch = "per-rank"\n'
        'environments = ["nodeepspeed"]\n'
        'reason = "a known upstream bug, see issue 123"\n'
    )
    matrix = load_with_tasks(write_matrix(tmp_path, extra=extra), known_tasks=TASKS)
    ddp = Cell.from_id("regression-cpu2-ddp-fp32")
    single = Cell.from_id("regression-cpu1-single-fp32")
    expected = matrix.expected_outcome(ddp, "nodeepspeed")
    assert expected is not None and expected.reason == "a known upstream bug, see issue 123"
    assert expected.status == "failed" and expected.diagnosis is not None
    assert expected.diagnosis.search("likely cause: per-rank batch statistics")
    assert matrix.expected_outcome(ddp, "deepspeed") is None
    assert matrix.expected_outcome(single, "nodeepspeed") is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("\n[bogus]\nx = 1\n", r"section = 'bogus': it is not a known section"),
        (
            '\n[[shapes]]\ndevice = "tpu"\nprocesses = 1\nstrategies = ["single"]\n',
            r"'tpu'.*not a valid device",
        ),
        ('\n[[shapes]]\ndevice = "cpu"\nprocesses = 0\nstrategies = ["single"]\n', r"processes = 0"),
        (
            '\n[[shapes]]\ndevice = "cpu"\nprocesses = 1\nstrategies = ["zero4"]\n',
            r"'zero4'.*not a valid strategy",
        ),
        ('\n[environments.x]\ndeepspeed = "yes"\n', r"deepspeed = 'yes'"),
        ('\n[environments.x]\ndeepspeed = true\nrunner = "a"\n', r"'runner': it is not a known key"),
        # [[expected]] says how a cell fails: the old 'xfailed' is refused with the fix
        ('\n[[expected]]\ntask = "regression"\nstatus = "xfailed"\nreason = "a known upstream bug"\n',
         r"status = 'xfailed'.*HOW the cell is expected to fail.*status = 'failed'"),
        ('\n[[expected]]\ntask = "regression"\nstatus = "boom"\nreason = "a known upstream bug"\n',
         r"status = 'boom': not a kind of failure.*'exception'"),
        ('\n[[expected]]\ntask = "regression"\nmatch = "per-rank ("\nreason = "a known upstream bug"\n',
         r"match = 'per-rank \(': not a usable regular expression"),
    ],
)
def test_bad_values_are_explained(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(MatrixError, match=message) as info:
        load_with_tasks(write_matrix(tmp_path, extra=extra), known_tasks=TASKS)
    assert "Valid:" in str(info.value) and "Fix:" in str(info.value)


def test_unknown_task_names_the_registered_ones(tmp_path: Path) -> None:
    path = write_matrix(tmp_path, SMALL_MATRIX.replace('task = ["regression"]', 'task = ["regresion"]'))
    with pytest.raises(MatrixError, match=r"'regresion': no task of that name is registered.*'regression'"):
        load_with_tasks(path, known_tasks=TASKS)


def test_invalid_toml_names_line(tmp_path: Path) -> None:
    path = tmp_path / "matrix.toml"
    path.write_text('[axes]\ntask = ["regression"\ndevice = 3\n')
    with pytest.raises(MatrixError, match=r"not valid TOML.*line"):
        load_with_tasks(path, known_tasks=TASKS)


CELLS = [
    Cell.from_id(i)
    for i in (
        "mlp-cpu1-single-fp32",
        "mlp-cpu2-ddp-bf16",
        "mlp-cpu2-zero3-fp16",
        "lm-cuda2-zero2-bf16",
        "lm-cuda1-single-fp16",
    )
]


@pytest.mark.parametrize(
    ("keyword", "markexpr", "expected"),
    [
        ("zero", None, ["mlp-cpu2-zero3-fp16", "lm-cuda2-zero2-bf16"]),
        ("mlp and not fp32", None, ["mlp-cpu2-ddp-bf16", "mlp-cpu2-zero3-fp16"]),
        (
            "CPU2 or single",
            None,
            ["mlp-cpu1-single-fp32", "mlp-cpu2-ddp-bf16", "mlp-cpu2-zero3-fp16", "lm-cuda1-single-fp16"],
        ),
        (None, "deepspeed", ["mlp-cpu2-zero3-fp16", "lm-cuda2-zero2-bf16"]),
        (None, "gpu or multi_gpu", ["lm-cuda2-zero2-bf16", "lm-cuda1-single-fp16"]),
        (None, "bf16 and not deepspeed", ["mlp-cpu2-ddp-bf16"]),
        ("lm", "fp16", ["lm-cuda1-single-fp16"]),
        ("nothing_like_this", None, []),
    ],
)
def test_selection_uses_pytest_grammar(
    keyword: str | None, markexpr: str | None, expected: list[str]
) -> None:
    assert [c.id for c in select(CELLS, keyword, markexpr)] == expected


def test_selection_parse_error_is_explained() -> None:
    with pytest.raises(SelectionError, match=r"-k 'zero and \(': it does not parse.*Fix:"):
        select(CELLS, "zero and (", None)


def test_opt_in_cells_only_when_named() -> None:
    assert opt_in_requested("canary_crash", "canary")
    assert opt_in_requested("canary and not hang", "canary")
    assert not opt_in_requested("cpu2", "canary")
    assert not opt_in_requested(None, "canary")
