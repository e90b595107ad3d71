"""The runner for real: torchrun launches shared by cells of one shape, judged against goldens.

Every test but the --isolate one reads one grouped run (`grouped_outcome`: five launches) of
the cells in IDS, the crash canary among them: its verdict (crashed, the dying rank's tail, the
rest of its group in a fresh launch) is judged here, on that run, instead of in a launch of its
own (moved from faults/test_canaries.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.judge.cell_verdict import cross_environment
from harness.judge.outcome import CellResult, Failure, Status
from harness.layout.launch_dir import LaunchDir
from harness.layout.report_dir import ReportDir
from harness.plan.cell import Cell
from harness.record.record_format import Record
from harness.run.runner import RunOptions, RunOutcome, launch_group_key, run_cells, run_outcome
from tests.harness.runner_helpers import assert_no_leftovers

pytestmark = pytest.mark.slow  # real torchrun launches: seconds each

IDS = [
    "nosuchtask-cpu1-single-fp32",  # no such task: `error` without a launch
    "canary_raise-cpu1-single-fp32",  # raises in training: `failed` with its traceback; ends its launch
    "canary_leak_set-cpu1-single-fp32",  # passes, but leaves a process-wide setting behind ...
    "canary_leak-cpu1-single-fp32",  # ... which makes this one fail; alone, it passes
    "canary_nan-cpu1-single-fp32",  # fails its comparison: the launch goes on; confirmed by a rerun
    "regression-cpu1-single-fp32",
    "dropout-cpu1-single-fp32",  # draws random numbers in training; one process: matches the golden
    "canary_crash-cpu2-ddp-fp32",  # rank 1 dies: `crashed`; ends its launch, the rest runs afresh
    "regression-cpu2-ddp-fp32",
    "dropout-cpu2-ddp-fp32",  # two processes: failed for its randomness (declared expected: xfailed)
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
def grouped_outcome(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunOutcome, Recorder]:
    report_dir = tmp_path_factory.mktemp("grouped")
    recorder = Recorder()
    outcome = run_outcome([Cell.from_id(i) for i in IDS], RunOptions(report_dir, timeout_s=90), recorder)
    return report_dir, outcome, recorder


@pytest.fixture(scope="module")
def grouped(grouped_outcome: tuple[Path, RunOutcome, Recorder]) -> tuple[Path, list[CellResult], Recorder]:
    report_dir, outcome, recorder = grouped_outcome
    return report_dir, outcome.results, recorder


def test_every_requested_cell_has_a_result_in_order(grouped: tuple[Path, list[CellResult], Recorder]) -> None:
    report_dir, results, recorder = grouped
    assert [r.id for r in results] == IDS
    status = {r.id: (r.status, r.failure) for r in results}
    assert status == {
        "nosuchtask-cpu1-single-fp32": (Status.ERROR, None),
        "canary_raise-cpu1-single-fp32": (Status.FAILED, Failure.EXCEPTION),
        "canary_leak_set-cpu1-single-fp32": (Status.PASSED, None),
        "canary_leak-cpu1-single-fp32": (Status.FAILED, Failure.DIVERGENCE),
        "canary_nan-cpu1-single-fp32": (Status.FAILED, Failure.DIVERGENCE),
        "regression-cpu1-single-fp32": (Status.PASSED, None),
        "dropout-cpu1-single-fp32": (Status.PASSED, None),
        "canary_crash-cpu2-ddp-fp32": (Status.CRASHED, None),
        "regression-cpu2-ddp-fp32": (Status.PASSED, None),
        "dropout-cpu2-ddp-fp32": (Status.XFAILED, Failure.RANDOMNESS),
        "regression-cuda2-ddp-fp32": (Status.SKIPPED, None),
    }
    assert sorted(recorder.finished) == sorted(IDS)
    assert_no_leftovers(str(report_dir))


def test_only_an_exception_ends_a_launch_and_divergences_are_rerun(
    grouped: tuple[Path, list[CellResult], Recorder],
) -> None:
    report_dir = grouped[0]
    launches = sorted(p.name for p in (report_dir / "launches").iterdir())
    # cpu1: launch 1 ends with the raising cell; launch 2 runs every other cpu1 cell, the failing
    # ones included; one rerun launch holds the two divergences (canary_leak first, so alone).
    # The unknown task never launched. cpu2: launch 1 ends with the crash, launch 2 runs the rest
    # (randomness is not rerun; test_crash_fails_its_cell... reads those two).
    assert launches == ["cpu1-001", "cpu1-002", "cpu1-rerun-001", "cpu2-001", "cpu2-002"]
    plan = (report_dir / "launches" / "cpu1-002" / "plan.json").read_text()
    assert "canary_raise" not in plan and "canary_nan" in plan and "dropout-cpu1-single-fp32" in plan
    rerun_plan = json.loads((report_dir / "launches" / "cpu1-rerun-001" / "plan.json").read_text())
    assert [c["id"] for c in rerun_plan["cells"]] == [
        "canary_leak-cpu1-single-fp32", "canary_nan-cpu1-single-fp32"]


def test_an_isolated_rerun_says_whether_it_agreed(grouped: tuple[Path, list[CellResult], Recorder]) -> None:
    report_dir, results, _ = grouped
    by_id = {r.id: r for r in results}
    nan = by_id["canary_nan-cpu1-single-fp32"].rerun
    assert nan is not None and nan.agreed and nan.identical and not nan.alone
    assert "confirmed: rerun in a fresh launch" in by_id["canary_nan-cpu1-single-fp32"].reason
    leak = by_id["canary_leak-cpu1-single-fp32"]
    assert leak.rerun is not None and leak.rerun.alone and not leak.rerun.agreed
    assert leak.rerun.status == Status.PASSED and leak.status == Status.FAILED
    assert "NOT confirmed: rerun alone in a fresh launch, it passed" in leak.reason
    cell = json.loads(json.dumps(leak.to_json()))  # as report.json holds it, and read back
    assert cell["rerun"]["status"] == "passed" and cell["rerun"]["alone"] and cell["failure"] == "divergence"
    assert CellResult.from_json(cell).rerun == leak.rerun
    assert (report_dir / "reruns" / "records" / "canary_nan-cpu1-single-fp32.safetensors").exists()


def test_exception_error_skip_and_pass_carry_their_evidence(
    grouped: tuple[Path, list[CellResult], Recorder],
) -> None:
    report_dir, results, _ = grouped
    by_id = {r.id: r for r in results}
    raised = by_id["canary_raise-cpu1-single-fp32"]
    assert "exception in training: RuntimeError: canary_raise: raised on purpose" in raised.reason
    assert "Traceback" in raised.detail and raised.rerun is None
    error = by_id["nosuchtask-cpu1-single-fp32"]
    assert "nosuchtask" in error.reason and "Fix:" in error.reason
    skipped = by_id["regression-cuda2-ddp-fp32"]
    assert skipped.reason == "needs 2 CUDA devices, found 0"
    assert skipped.extra["reason_code"] == "needs_cuda"
    passed = by_id["regression-cpu2-ddp-fp32"]
    assert passed.comparisons and all(c.ok for c in passed.comparisons)
    assert len(passed.extra["losses"]) == len(passed.extra["golden_losses"]) > 0
    assert passed.duration_s > 0
    assert (report_dir / "records" / "regression-cpu2-ddp-fp32.safetensors").exists()


def test_randomness_in_training_is_detected_and_fails_multi_process_cells(
    grouped: tuple[Path, list[CellResult], Recorder],
) -> None:
    by_id = {r.id: r for r in grouped[1]}
    single, pair = by_id["dropout-cpu1-single-fp32"], by_id["dropout-cpu2-ddp-fp32"]
    steps = len(single.extra["losses"])
    assert single.extra["evidence"]["random_draws"]["drawing"] == steps  # every step drew
    assert by_id["regression-cpu1-single-fp32"].extra["evidence"]["random_draws"] == {
        "steps": steps, "drawing": 0, "generators": ""}
    assert pair.extra["evidence"]["random_draws"]["drawing"] == steps
    assert "draws random numbers during training (dropout?): per-process streams diverge" in pair.reason


def test_startup_is_measured_apart_from_the_cells(grouped_outcome: tuple[Path, RunOutcome, Recorder]) -> None:
    report_dir, outcome, _ = grouped_outcome
    assert outcome.startup is not None and outcome.startup.launches == 5
    per_launch = {str(entry["launch"]): entry for entry in outcome.startup.per_launch}
    assert all(float(str(entry["startup_s"])) > 0 and float(str(entry["warm_up_s"])) > 0
               for entry in per_launch.values())
    assert outcome.startup.deepspeed_ops_s is None  # no DeepSpeed cell: no op built
    assert "start-up: 5 launch(es)" in outcome.startup.line()
    # The report dir keeps the documented copy: the same figures the run returned.
    assert json.loads(ReportDir(report_dir).startup.read_text(encoding="utf-8")) == outcome.startup.to_json()


def test_nan_canary_diagnosis_names_the_step(grouped: tuple[Path, list[CellResult], Recorder]) -> None:
    nan = {r.id: r for r in grouped[1]}["canary_nan-cpu1-single-fp32"]
    assert "NaN first at step 4" in nan.reason
    losses = nan.extra["losses"]
    assert all(x == x for x in losses[:4]) and losses[4] != losses[4]  # finite, then NaN at step 4


def test_crash_fails_its_cell_with_the_dying_ranks_tail_and_the_rest_runs_afresh(
    grouped: tuple[Path, list[CellResult], Recorder],
) -> None:
    """(From faults/test_canaries.py, whose own launch of the crash canary and one cell after it
    this run now holds.) A rank that dies fails its cell as `crashed`, with that rank's tail, in
    bounded time; the cells after it in its launch run in a fresh one and pass."""
    report_dir, results, _ = grouped
    by_id = {r.id: r for r in results}
    crash, after = by_id["canary_crash-cpu2-ddp-fp32"], by_id["regression-cpu2-ddp-fp32"]
    assert crash.status == Status.CRASHED
    assert crash.reason.startswith("rank 1 died (exit code 13)")
    assert "canary_crash: rank 1 dies now, at training step 3" in crash.detail  # the tail of rank 1
    assert after.status == Status.PASSED  # the next cell ran, in a fresh launch:
    launches = report_dir / "launches"
    assert sorted(p.name for p in launches.iterdir() if p.name.startswith("cpu2")) == ["cpu2-001", "cpu2-002"]
    planned = {name: [c["id"] for c in LaunchDir(launches / name).read_plan()["cells"]]
               for name in ("cpu2-001", "cpu2-002")}
    assert planned == {"cpu2-001": ["canary_crash-cpu2-ddp-fp32", after.id, "dropout-cpu2-ddp-fp32"],
                       "cpu2-002": [after.id, "dropout-cpu2-ddp-fp32"]}
    # Bounded: torchrun stops rank 0 as soon as rank 1 is gone. From the crash launch's start to
    # the next cell's result in the fresh launch, as the canary's own run (then both launches
    # whole) was bounded; a rank 0 left waiting would have run into the 90 s timeout.
    started = LaunchDir(launches / "cpu2-001").plan.stat().st_mtime
    finished = LaunchDir(launches / "cpu2-002").finished(after.id).stat().st_mtime
    assert finished - started < 90
    assert_no_leftovers(str(report_dir))


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
