"""The sweep's version table: each environment's status, counts and reason, from what its report
dir holds (version_status.json, the cells' results, sweep_times.json)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.judge.outcome import CellResult, Status
from harness.plan.cell import Cell
from harness.versions.status import write_status
from harness.versions.table import version_row, versions_markdown

REFUSAL = ("refused by the core: deepspeed 0.16.9 is installed: it is outside the supported range: "
           "learning rates differ. Valid: deepspeed>=0.19.4,<0.20. Fix: pip install ...")


def _result(cell_id: str, status: Status, reason: str = "") -> CellResult:
    return CellResult(Cell.from_id(cell_id), status=status, reason=reason)


def _dir(tmp_path: Path, supported: bool, stage: str = "", reason: str = "") -> Path:
    write_status(tmp_path, {"torch": "2.13.0", "deepspeed": "0.19.8" if supported else "0.16.9",
                            "supported": supported, "stage": stage, "reason": reason})
    (tmp_path / "sweep_times.json").write_text(json.dumps({"install": 50.0, "cells": 100.0}))
    return tmp_path


PASSING = [_result("regression-cpu2-zero1-fp32", Status.PASSED),
           _result("classifier-cpu2-zero2-bf16", Status.PASSED),
           _result("batchnorm-cpu2-zero3-fp32", Status.XFAILED, "plain BatchNorm on 2 processes")]


def test_a_supported_release_counts_declared_failures_apart_from_passes(tmp_path: Path) -> None:
    row = version_row("deepspeed_0_19", _dir(tmp_path, True), {}, PASSING)
    assert row is not None
    assert (row.status, row.passed, row.xfailed, row.failed) == ("supported", 2, 1, 0)
    assert row.reason == "every cell as expected: 2 passed, 1 failed as matrix.toml declares"
    table = "\n".join(versions_markdown([row]))
    row_line = "| `deepspeed_0_19` | 2.13.0 | 0.19.8 | supported | 2 | 1 | 0 | 150 (install 50, cells 100) |"
    assert row_line in table


def test_a_failing_cell_inside_the_range_is_a_regression_named_by_its_first_cell(tmp_path: Path) -> None:
    results = [*PASSING, _result("lm-cpu2-zero3-fp16", Status.FAILED, "loss leaves tolerance at step 3")]
    row = version_row("deepspeed_0_19", _dir(tmp_path, True), {}, results)
    assert row is not None and (row.status, row.failed) == ("failing", 1)
    assert row.reason == "first failing cell lm-cpu2-zero3-fp16: failed: loss leaves tolerance at step 3"


def test_a_refused_release_run_anyway_names_the_refusal_and_its_first_failing_cell(tmp_path: Path) -> None:
    failing = _result("classifier-cpu2-zero1-fp32", Status.FAILED, "learning rate leaves tolerance")
    results = [*PASSING, failing]
    row = version_row("deepspeed_0_16", _dir(tmp_path, False, "core", REFUSAL), {}, results)
    assert row is not None and row.status == "not supported"
    assert row.reason.startswith("refused by the core: deepspeed 0.16.9 is installed")
    assert "Valid:" not in row.reason  # the range and the fix are the table's own columns
    assert row.reason.endswith("run anyway: first failing cell classifier-cpu2-zero1-fp32: failed: "
                               "learning rate leaves tolerance")


def test_a_refused_release_whose_cells_all_pass_is_a_candidate_for_the_range(tmp_path: Path) -> None:
    row = version_row("deepspeed_0_16", _dir(tmp_path, False, "core", REFUSAL), {}, PASSING)
    assert row is not None and row.status == "works outside the range"
    assert row.reason.endswith("yet every cell as expected: 2 passed, 1 failed as matrix.toml declares")


def test_an_install_error_is_not_supported_with_its_reason_and_no_cells(tmp_path: Path) -> None:
    reason = "install error: pip install deepspeed==0.16.9 failed"
    row = version_row("deepspeed_0_16", _dir(tmp_path, False, "install", reason), {}, [])
    assert row is not None and (row.status, row.reason, row.passed) == ("not supported", reason, 0)


def test_a_report_dir_that_is_no_sweep_environment_has_no_row(tmp_path: Path) -> None:
    assert version_row("deepspeed", tmp_path, {}, PASSING) is None


def test_an_environment_of_accelerate_cells_names_its_accelerate_release(tmp_path: Path) -> None:
    results = [_result("lm-cpu2-ddp-fp32-accelerate", Status.PASSED)]
    row = version_row("accelerate_1_14", _dir(tmp_path, True), {"accelerate": "1.14.0"}, results)
    assert row is not None and row.accelerate == "1.14.0" and row.to_json()["accelerate"] == "1.14.0"
    assert "| `accelerate_1_14` (accelerate 1.14.0) | 2.13.0 | 0.19.8 | supported |" in "\n".join(
        versions_markdown([row]))
    core = version_row("deepspeed_0_19", _dir(tmp_path, True), {"accelerate": "1.14.0"}, PASSING)
    assert core is not None and core.accelerate == ""  # accelerate installed, but its cells did not run
