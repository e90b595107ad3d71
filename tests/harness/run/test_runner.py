"""The runner for real: torchrun launches shared by cells of one shape, judged against goldens."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.run.runner import RunOptions, launch_group_key, run_cells
from harness.spec.cell import Cell
from harness.spec.matrix import Expected, Match
from harness.truth.judge import apply_expected, cross_environment, new_result
from harness.truth.outcome import CellResult, Status
from harness.truth.record import Record
from tests.harness.runner_helpers import assert_no_leftovers

pytestmark = pytest.mark.slow  # real torchrun launches: seconds each

IDS = [
    "nosuchtask-cpu1-single-fp32",  # raises in the worker: `error`, and the group goes on afresh
    "canary_nan-cpu1-single-fp32",  # fails its comparison: the cell after it gets a fresh launch
    "regression-cpu1-single-fp32",
    "regression-cpu2-ddp-fp32",
    "regression-cuda2-ddp-fp32",  # no CUDA here: skipped with a sentence
]


class Recorder:
    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []

    def cell_started(self, cell_id: str) -> None:
        self.started.append(cell_id)

    def cell_finished(self, result: CellResult) -> None:
        self.finished.append(result.id)


@pytest.fixture(scope="module")
def grouped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[CellResult], Recorder]:
    report_dir = tmp_path_factory.mktemp("grouped")
    recorder = Recorder()
    results = run_cells([Cell.from_id(i) for i in IDS], RunOptions(report_dir, timeout_s=90), recorder)
    return report_dir, results, recorder


def test_every_requested_cell_has_a_result_in_order(grouped: tuple[Path, list[CellResult], Recorder]) -> None:
    report_dir, results, recorder = grouped
    assert [r.id for r in results] == IDS
    status = {r.id: r.status for r in results}
    assert status == {
        "nosuchtask-cpu1-single-fp32": Status.ERROR,
        "regression-cpu1-single-fp32": Status.PASSED,
        "canary_nan-cpu1-single-fp32": Status.FAILED,
        "regression-cpu2-ddp-fp32": Status.PASSED,
        "regression-cuda2-ddp-fp32": Status.SKIPPED,
    }
    assert sorted(recorder.finished) == sorted(IDS)
    assert_no_leftovers(str(report_dir))


def test_cells_of_one_shape_share_a_launch_and_any_failure_starts_a_fresh_one(
    grouped: tuple[Path, list[CellResult], Recorder],
) -> None:
    report_dir = grouped[0]
    launches = sorted(p.name for p in (report_dir / "launches").iterdir())
    # cpu1: launch 1 ends with the erroring cell; launch 2 with the NaN cell's failed comparison;
    # the last cpu1 cell runs in launch 3. cpu2 has one cell, one launch.
    assert launches == ["cpu1-001", "cpu1-002", "cpu1-003", "cpu2-001"]
    plan = (report_dir / "launches" / "cpu1-002" / "plan.json").read_text()
    assert "regression-cpu1-single-fp32" in plan and "canary_nan-cpu1-single-fp32" in plan
    plan = (report_dir / "launches" / "cpu1-003" / "plan.json").read_text()
    assert "regression-cpu1-single-fp32" in plan and "canary_nan" not in plan


def test_error_skip_and_pass_carry_their_evidence(grouped: tuple[Path, list[CellResult], Recorder]) -> None:
    report_dir, results, _ = grouped
    by_id = {r.id: r for r in results}
    error = by_id["nosuchtask-cpu1-single-fp32"]
    assert "nosuchtask" in error.reason and "Traceback" in error.detail
    skipped = by_id["regression-cuda2-ddp-fp32"]
    assert skipped.reason == "needs 2 CUDA devices, found 0"
    assert skipped.extra["reason_code"] == "needs_cuda"
    passed = by_id["regression-cpu2-ddp-fp32"]
    assert passed.comparisons and all(c.ok for c in passed.comparisons)
    assert len(passed.extra["losses"]) == len(passed.extra["golden_losses"]) > 0
    assert passed.duration_s > 0
    assert (report_dir / "records" / "regression-cpu2-ddp-fp32.safetensors").exists()


def test_nan_canary_diagnosis_names_the_step(grouped: tuple[Path, list[CellResult], Recorder]) -> None:
    nan = {r.id: r for r in grouped[1]}["canary_nan-cpu1-single-fp32"]
    assert "NaN first at step 4" in nan.reason
    losses = nan.extra["losses"]
    assert all(x == x for x in losses[:4]) and losses[4] != losses[4]  # finite, then NaN at step 4


def test_cross_environment_check_is_bitwise(
    grouped: tuple[Path, list[CellResult], Recorder], tmp_path: Path
) -> None:
    report_dir = grouped[0]
    stem = report_dir / "records" / "regression-cpu2-ddp-fp32"
    other = tmp_path / "other" / "records"
    other.mkdir(parents=True)
    for suffix in (".json", ".safetensors"):
        shutil.copy(stem.with_name(stem.name + suffix), other / (stem.name + suffix))
    record = Record.load(stem)
    same, note = cross_environment(record, other / stem.name)
    assert same.ok and "bit-identical" in note
    changed = Record.load(stem)
    changed.losses[2] = float(changed.losses[2]) + 1e-7  # the smallest visible change
    changed.save(other / stem.name)
    differs, note = cross_environment(record, other / stem.name)
    assert not differs.ok and "losses" in note


def test_isolate_runs_one_launch_per_cell(tmp_path: Path) -> None:
    cells = [Cell.from_id("regression-cpu1-single-fp32"), Cell.from_id("canary_nan-cpu1-single-fp32")]
    results = run_cells(cells, RunOptions(tmp_path, timeout_s=90, isolate=True))
    assert [r.status for r in results] == [Status.PASSED, Status.FAILED]
    assert sorted(p.name for p in (tmp_path / "launches").iterdir()) == ["cpu1-001", "cpu1-002"]
    assert_no_leftovers(str(tmp_path))


def test_launch_group_key_is_the_launch_shape() -> None:
    assert launch_group_key(Cell.from_id("lm-cpu2-zero3-bf16")) == "cpu2"
    assert launch_group_key(Cell.from_id("regression-cpu2-ddp-fp32")) == "cpu2"
    assert launch_group_key(Cell.from_id("lm-cuda1-single-fp16")) == "cuda1"


def _result(status: Status) -> CellResult:
    return new_result(Cell.from_id("lm-cpu2-zero3-bf16"), status, "observed reason")


def test_expected_failure_is_xfailed_and_an_unexpected_pass_is_xpassed() -> None:
    expected = Expected(Match({"strategy": ("zero3",)}), "xfailed", "known DeepSpeed issue 42")
    failed = apply_expected(_result(Status.FAILED), expected)
    assert failed.status == Status.XFAILED and "known DeepSpeed issue 42" in failed.reason
    assert "observed reason" in failed.reason
    assert apply_expected(_result(Status.CRASHED), expected).status == Status.XFAILED
    passed = apply_expected(_result(Status.PASSED), expected)
    assert passed.status == Status.XPASSED and passed.status.is_unexpected_failure
    assert apply_expected(_result(Status.SKIPPED), expected).status == Status.SKIPPED
    assert apply_expected(_result(Status.FAILED), None).status == Status.FAILED
