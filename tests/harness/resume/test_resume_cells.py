"""Resume cells as the matrix declares them: ids, selection, markers, the [resume] section and
its errors (no launch)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from harness.cli.run import selected_cells
from harness.errors import MatrixError
from harness.judge.outcome import CellResult, Status
from harness.paths import MATRIX_PATH
from harness.plan.cell import Cell, ResumeCell, SourceCell, cell_from_fields
from harness.plan.matrix import load_matrix
from harness.plan.resume_cells import ResumePoint
from harness.plan.selection import resume_requested, select
from harness.tasks import get_task
from tests.harness.runner_helpers import write_matrix_file

CPU_ENDS = ["cpu1-single", "cpu2-ddp", "cpu2-zero1", "cpu2-zero2", "cpu2-zero3"]


def test_every_resume_id_round_trips_and_names_both_ends() -> None:
    matrix = load_matrix()
    assert matrix.resume_cells
    for cell in matrix.resume_cells:
        again = Cell.from_id(cell.id)
        assert isinstance(again, ResumeCell) and again == cell
        source_text, destination_text = cell.id.split(":")
        assert destination_text == cell.destination_cell.id[len(cell.task) + 1:]
        if cell.source_cell is not None:
            assert source_text == cell.source_cell.id
        assert "resume" in cell.markers


def test_grid_covers_every_cpu_pair_in_fp32_and_the_bf16_pairs_asked_for() -> None:
    matrix = load_matrix()
    ids = {cell.id for cell in matrix.resume_cells}
    tasks = sorted({cell.task for cell in matrix.resume_cells})
    # The tasks that draw random numbers across the checkpoint: a reshuffled epoch, dropout masks.
    assert {"shuffle", "dropout"} <= set(tasks)
    assert "shuffle-cpu2-ddp-fp32:cpu1-single-fp32" in ids and "dropout-golden-fp32:cpu1-single-fp32" in ids
    for task in ("classifier", "lm"):  # every CPU pair
        for source in ["golden", *CPU_ENDS]:
            for destination in CPU_ENDS:
                assert f"{task}-{source}-fp32:{destination}-fp32" in ids
        bf16 = [(end, end) for end in CPU_ENDS] + [("cpu2-zero3", "cpu2-ddp"), ("cpu2-ddp", "cpu2-zero3")]
        for source, destination in bf16:
            assert f"{task}-{source}-bf16:{destination}-bf16" in ids


def test_a_task_with_adamw_a_scheduler_and_accumulation_resumes_mid_epoch_at_a_window_boundary() -> None:
    matrix = load_matrix()
    chosen = {cell.task: cell.resume_step for cell in matrix.resume_cells}
    demanding = []
    for name, step in chosen.items():
        task = get_task(name)
        model = task.build_model()
        optimizer = task.build_optimizer(model)
        scheduler = task.build_scheduler(optimizer)
        lrs = []
        for _ in range(task.steps):  # does the schedule really move the lr?
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()  # no gradients: changes nothing, keeps torch's call order
            scheduler.step()
        point = ResumePoint.of(task, step)
        if (isinstance(optimizer, torch.optim.AdamW) and len(set(lrs)) > 1
                and task.gradient_accumulation_steps > 1):
            demanding.append(name)
            assert point.mid_epoch, f"{name}: step {step} is at an epoch boundary"
            # a whole number of accumulation windows into the epoch: the next micro-step opens one
            assert point.batch % task.gradient_accumulation_steps == 0
            assert 0 < point.batch < task.micro_steps_per_epoch
    assert demanding, "no resume task has AdamW + a moving scheduler + gradient accumulation"


def test_k_selects_resume_ids_with_pytests_grammar() -> None:
    matrix = load_matrix()
    picked = select(matrix.resume_cells, "classifier-cpu2-zero3-fp32:cpu1-single-fp32", None)
    assert [c.id for c in picked] == ["classifier-cpu2-zero3-fp32:cpu1-single-fp32"]
    from_zero3 = select(matrix.resume_cells, "zero3-fp32: and not golden", None)
    assert from_zero3 and all(c.source == "cpu2-zero3" and c.precision == "fp32" for c in from_zero3)
    assert {c.id for c in select(matrix.resume_cells, None, "resume and bf16")} == {
        c.id for c in matrix.resume_cells if c.precision == "bf16"}
    assert resume_requested("resume and lm", None)
    assert resume_requested(None, "resume")
    assert resume_requested("lm-cpu2-ddp-fp32:cpu2-zero3", None)
    assert not resume_requested("classifier and cpu2", "deepspeed")
    assert not any(isinstance(c, ResumeCell) for c in matrix.cells + matrix.all_cells())


def _selected(keyword: str | None = None, markexpr: str | None = None,
              implementation: list[str] | None = None) -> list[Cell]:
    args = argparse.Namespace(matrix=None, keyword=keyword, markexpr=markexpr, implementation=implementation)
    return selected_cells(args)[1]


def test_the_whole_matrix_and_a_marker_selection_take_the_resume_grid_too() -> None:
    """save_state/load_state run in no other cell: a run of the whole matrix without the grid
    would pass a core whose checkpoints cannot be resumed."""
    resume_ids = {c.id for c in load_matrix().resume_cells}
    assert resume_ids <= {c.id for c in _selected()}
    deepspeed_bf16 = {c.id for c in _selected(markexpr="deepspeed and bf16") if isinstance(c, ResumeCell)}
    assert deepspeed_bf16 and all(":" in i and "bf16" in i and "zero" in i for i in deepspeed_bf16)
    assert not any(isinstance(c, ResumeCell) for c in _selected(markexpr="not resume"))
    assert {c.id for c in _selected(markexpr="resume")} == resume_ids


def test_a_k_of_a_cell_id_leaves_the_resume_cells_it_is_a_substring_of_out() -> None:
    assert [c.id for c in _selected(keyword="lm-cpu2-zero3-fp32")] == ["lm-cpu2-zero3-fp32"]
    assert not any(isinstance(c, ResumeCell) for c in _selected(keyword="zero3"))
    assert {c.id for c in _selected(keyword="lm-cpu2-zero3-fp32:")} == {
        c.id for c in load_matrix().resume_cells if c.id.startswith("lm-cpu2-zero3-fp32:")}


def test_another_implementations_run_takes_no_resume_cell_of_the_core() -> None:
    assert not any(isinstance(c, ResumeCell) for c in _selected(implementation=["accelerate"]))


def test_markers_of_both_ends() -> None:
    cell = Cell.from_id("lm-cpu2-zero3-bf16:cpu1-single-bf16")
    assert {"deepspeed", "bf16", "resume"} <= set(cell.markers)
    assert "deepspeed" not in Cell.from_id("lm-golden-fp32:cpu2-ddp-fp32").markers


@pytest.mark.parametrize("bad", [
    "lm-cpu2-zero3-fp32:cpu1-single-bf16",  # precisions differ
    "lm-gold-fp32:cpu1-single-fp32",  # unknown source
    "lm-cpu2-zero3-fp32:lm-cpu1-single-fp32",  # a task on the destination side
    "lm-cpu2-zero3-fp32:cpu1-single-fp32:cpu1-single-fp32",
])
def test_bad_resume_ids_say_the_form(bad: str) -> None:
    with pytest.raises(ValueError, match=r"classifier-cpu2-zero3-fp32:cpu1-single-fp32"):
        Cell.from_id(bad)


def test_cells_survive_report_json() -> None:
    cell = load_matrix().resume_cells[-1]
    back = CellResult.from_json(CellResult(cell, Status.PASSED, "fine").to_json())
    assert isinstance(back.cell, ResumeCell) and back.cell == cell
    assert back.cell.resume_step == cell.resume_step
    source = SourceCell("lm", "cpu", 2, "zero3", "fp32", save_after=8)
    assert source.id == "lm-cpu2-zero3-fp32@step8"
    assert cell_from_fields({"task": "lm", "device": "cpu", "processes": 2, "strategy": "zero3",
                             "precision": "fp32", "save_after": 8}) == source


def _matrix_with(tmp_path: Path, resume: str) -> Path:
    text = MATRIX_PATH.read_text(encoding="utf-8")  # its [resume] section replaced by `resume`
    start, end = text.index("[resume.steps]"), text.index("[tolerances]\n")
    path = tmp_path / "matrix.toml"
    write_matrix_file(path, text[:start] + resume + "\n" + text[end:])
    return path


@pytest.mark.parametrize(("resume", "message"), [
    ('[resume.steps]\nlm = 12\n', r"resume.steps\]\.lm = 12.*1\.\.11 \(lm takes 12 optimizer steps\)"),
    ('[resume.steps]\nlm = 3\n[[resume.grid]]\ntasks = ["lm"]\nprecisions = ["fp32"]\n'
     'from = ["cpu3-ddp"]\nto = ["cpu1-single"]\n', r"cpu3-ddp.*not a launch shape.*'cpu2-zero3'"),
    ('[resume.steps]\nlm = 3\n[[resume.grid]]\ntasks = ["lm"]\nprecisions = ["fp32"]\n'
     'pairs = ["cpu2-ddp>cpu1-single"]\n', r"SOURCE:DESTINATION"),
    ('[resume.steps]\nlm = 3\n[[resume.grid]]\ntasks = ["classifier"]\nprecisions = ["fp32"]\n'
     'pairs = ["cpu2-ddp:cpu1-single"]\n', r"no resume step in \[resume.steps\]"),
    ('[resume.steps]\nlm = 3\n[[resume.expected]]\nfrom = ["cpu2-ddp"]\nreason = "short"\n', r"reason"),
])
def test_bad_resume_sections_are_refused_with_the_fix(tmp_path: Path, resume: str, message: str) -> None:
    with pytest.raises(MatrixError, match=message):
        load_matrix(_matrix_with(tmp_path, resume))


def test_expected_outcome_of_a_pair_applies_to_that_pair_only(tmp_path: Path) -> None:
    path = _matrix_with(tmp_path, (
        '[resume.steps]\nlm = 3\n[[resume.grid]]\ntasks = ["lm"]\nprecisions = ["fp32"]\n'
        'from = ["cpu2-zero3", "cpu2-ddp"]\nto = ["cpu1-single"]\n'
        '[[resume.expected]]\nfrom = ["cpu2-zero3"]\nto = ["cpu1-single"]\n'
        'reason = "a reason long enough to be one"\n'))
    matrix = load_matrix(path)
    assert [c.resume_step for c in matrix.resume_cells] == [3, 3]
    marked = {c.id: matrix.expected_outcome(c) is not None for c in matrix.resume_cells}
    assert marked == {"lm-cpu2-zero3-fp32:cpu1-single-fp32": True, "lm-cpu2-ddp-fp32:cpu1-single-fp32": False}
    assert matrix.expected_outcome(Cell("lm", "cpu", 1, "single", "fp32")) is None
