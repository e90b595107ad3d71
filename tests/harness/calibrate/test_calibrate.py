"""`harness calibrate`: benign noise of the reference, the detection thresholds, and calibrated
tolerances held against cells. Figures are asserted by their relations, never by their bits: the
goldens read here may have been made on another machine (tests(deepspeed) moves them on purpose)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from harness.calibrate.against_cells import check_cells
from harness.calibrate.calibrated import family_proposals, task_tolerances
from harness.calibrate.noise import measure
from harness.calibrate.thresholds import GOALS, detection_threshold, first_failure
from harness.calibrate.variants import cell_semantics, splits_change_the_math, variants_for
from harness.cli.main import main
from harness.golden.golden_store import load_golden
from harness.golden.reference import Perturbation, ReferenceInputs, train_reference
from harness.plan.matrix import load_matrix
from harness.record.record_format import Record
from harness.starter import tolerances_text
from harness.tasks import get_task

pytestmark = pytest.mark.goldens


def test_split_variants_are_left_out_where_a_split_changes_the_math() -> None:
    for name in ("batchnorm", "dropout"):
        assert splits_change_the_math(get_task(name).build_model())
    dropout = get_task("dropout").build_model()
    assert all(v.perturbation.splits == 1 for v in variants_for("fp32", dropout))
    # BatchNorm alone: the one split that applies synchronises it, as its passing 2-process cells do
    batchnorm = get_task("batchnorm").build_model()
    split = [v.name for v in variants_for("bf16", batchnorm) if v.perturbation.splits > 1]
    assert split == ["two_ranks_sync_batchnorm"]
    lm = [v.name for v in variants_for("fp32", get_task("lm").build_model()) if v.perturbation.splits > 1]
    assert "two_ranks" in lm and "two_ranks_sync_batchnorm" not in lm  # no BatchNorm to synchronise


def test_benign_noise_stays_inside_the_tolerances_in_force() -> None:
    table = load_matrix().tolerances
    needs = measure(["regression", "lm"], ["fp32", "bf16"], table)
    assert {n.variant for n in needs} >= {"this_machine", "avx2_kernels", "two_ranks", "two_ranks_fsdp_half",
                                          "two_ranks_zero1_half", "two_ranks_zero2_half"}
    # the kernel-level variant ran in its child, which said what its torch ran (never above AVX2)
    assert {n.ran_with for n in needs if n.variant == "avx2_kernels"} <= {"AVX2", "DEFAULT"}
    assert all(not n.ran_with for n in needs if n.variant != "avx2_kernels")
    for proposal in family_proposals(needs, table):
        assert proposal.need.atol <= proposal.in_force, proposal


def test_a_threshold_is_where_the_comparison_starts_to_fail() -> None:
    task, table = get_task("sgd_accum"), load_matrix().tolerances
    inputs, golden = ReferenceInputs.of(task), load_golden("sgd_accum", "fp32")
    tolerance = table.entries[("fp32", "plain")]
    found = detection_threshold(task, "fp32", "plain", inputs, golden, tolerance)
    assert found.error is not None and found.meets_goal and found.error <= GOALS["fp32"]
    assert first_failure(task, "fp32", inputs, golden, tolerance, found.error) is not None
    assert first_failure(task, "fp32", inputs, golden, tolerance, found.error / 1.2) is None


def test_an_adam_task_cannot_see_a_uniform_gradient_scale_and_says_why() -> None:
    task, table = get_task("classifier"), load_matrix().tolerances
    golden = load_golden("classifier", "bf16")
    tolerance = table.entries[("bf16", "zero")]
    found = detection_threshold(task, "bf16", "zero", ReferenceInputs.of(task), golden, tolerance)
    assert found.error is None and found.scale_invariant and not found.meets_goal


def _report_dir(tmp_path: Path, cell_id: str, record: Record) -> Path:
    (tmp_path / "records").mkdir(parents=True)
    record.save(tmp_path / "records" / cell_id)
    (tmp_path / "report.json").write_text(json.dumps({"cells": [{"id": cell_id, "status": "passed"}]}))
    return tmp_path


@pytest.mark.parametrize(("scale", "holds"), [(1.0, True), (1.02, False)])
def test_calibrated_tolerances_hold_a_benign_run_and_catch_a_two_percent_gradient_error(
        tmp_path: Path, scale: float, holds: bool) -> None:
    # A record made by the reference (an independent stand-in for a cell): split as two ranks
    # would, with or without a 2% gradient error; judged with sgd_accum's calibrated bf16 tolerance.
    table = load_matrix().tolerances
    per_task = task_tolerances(measure(["sgd_accum"], ["bf16"], table), table)
    two_ranks = Perturbation(splits=2, gradient_scale=scale)
    record = train_reference(get_task("sgd_accum"), "bf16", perturbation=two_ranks)
    [check] = check_cells(_report_dir(tmp_path, "sgd_accum-cpu2-ddp-bf16", record), per_task)
    assert check.ok is holds, check


def test_the_command_prints_both_tables_and_writes_the_figures(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "calibration.json"
    assert main(["calibrate", "--task", "scalar", "--precision", "bf16", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "bf16.zero.eval" in text and "detection thresholds" in text and "scalar" in text
    figures = json.loads(out.read_text())
    assert figures["needs"] and len(figures["thresholds_in_force"]) == 2  # plain and zero
    # the same rows as `run --exact` judges them (tests/harness/calibrate/test_exact_thresholds.py)
    assert re.search(r"--exact: \d of 2 rows with a passing cell meet the goal", text)
    exact = figures["thresholds_exact"]
    assert [(r["task"], r["family"]) for r in exact] == [("scalar", "plain"), ("scalar", "zero")]
    assert all(r["passing"] > 0 and r["error"] is not None for r in exact)
    # ... and as every run judges them, the own-semantics check included (test_judged_thresholds.py),
    # with the check's noise beside them
    assert "run: " in text and "own-semantics check:" in text
    judged = figures["thresholds_judged"]
    assert [(r["task"], r["family"]) for r in judged] == [("scalar", "plain"), ("scalar", "zero")]
    assert all(r["members"] > 0 and r["error"] is not None for r in judged)
    assert {tuple(n["key"]) for n in figures["semantics_needs"]} >= {("bf16", "scalar", "splits_1")}


def test_a_task_without_its_own_golden_is_refused_with_the_valid_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--task", "canary_nan"]) == 2
    text = capsys.readouterr().out
    assert "canary_nan" in text and "regression" in text and "Fix:" in text


@pytest.mark.parametrize("flag", ["--write-semantics-tolerances", "--write-weight-tolerances"])
def test_writing_a_tolerance_file_for_one_task_is_refused(flag: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", flag, "--task", "regression"]) == 2
    text = capsys.readouterr().out
    assert flag in text and "would lose the others" in text and "Fix: drop --task" in text


def test_a_matrix_without_a_cell_the_semantics_check_takes_is_refused_with_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fp32_only = tmp_path / "matrix.toml"
    fp32_only.write_text('[axes]\ntask = ["regression"]\ndevice = ["cpu"]\nstrategy = ["single"]\n'
                         'precision = ["fp32"]\n\n[[shapes]]\ndevice = "cpu"\nprocesses = 1\n'
                         f'strategies = ["single"]\n\n{tolerances_text()}', encoding="utf-8")
    assert main(["calibrate", "--matrix", str(fp32_only), "--write-semantics-tolerances"]) == 2
    text = capsys.readouterr().out
    assert "no fp16/bf16 CPU cell the own-semantics check can judge" in text and "Fix:" in text
    assert not (tmp_path / "semantics_tolerances.toml").exists()


def test_a_familys_backends_are_the_golden_loop_and_the_variants_that_reproduce_its_half_precision() -> None:
    def names(family: str, precision: str, task: str) -> list[str]:
        return [p.name for p in cell_semantics(family, precision, get_task(task).build_model())]

    assert names("plain", "bf16", "sgd_accum") == ["golden", "two_ranks_fsdp_half"]
    assert names("zero", "fp16", "sgd_accum") == ["two_ranks_zero1_half", "two_ranks_zero2_half"]
    assert names("zero", "fp32", "sgd_accum") == names("plain", "fp32", "lm") == ["golden"]
    assert names("zero", "bf16", "dropout") == ["golden"]  # the variants split the batch: not its math


def test_a_familys_threshold_is_its_weakest_backends_and_a_benign_failure_is_never_hidden() -> None:
    task, table = get_task("sgd_accum"), load_matrix().tolerances
    inputs, golden = ReferenceInputs.of(task), load_golden("sgd_accum", "bf16")
    tolerance = table.with_task(table.entries[("bf16", "zero")], "sgd_accum")
    backends = cell_semantics("zero", "bf16", task.build_model())
    each = [detection_threshold(task, "bf16", "zero", inputs, golden, tolerance, [b]) for b in backends]
    family = detection_threshold(task, "bf16", "zero", inputs, golden, tolerance, backends)
    assert all(t.error is not None and t.error > 0 for t in each)
    assert family.error == max(t.error for t in each)  # type: ignore[type-var]
    assert family.semantics == max(each, key=lambda t: t.error).semantics  # type: ignore[arg-type, return-value]
    # Judged as tightly as an fp32 cell, ZeRO's half-rounded weights fail with no bug at all: that
    # is the result, though the golden's loop alone would still bisect to a threshold.
    tight = replace(tolerance, quantities={"state_dict": replace(tolerance, atol=1e-5, rtol=0.0)})
    strict = detection_threshold(task, "bf16", "zero", inputs, golden, tight, [Perturbation(), *backends])
    assert strict.error == 0.0 and "unperturbed" in strict.caught_by and strict.semantics != "golden"
