"""--compare-records across versions: each cell's numbers against the other environment's record,
classed bit-identical / within tolerance / diverged (harness/judge/version_diff.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness.golden.golden_store import load_golden
from harness.judge.version_diff import record_change, same_torch
from harness.plan.matrix import load_matrix

# Reads the goldens: run again against goldens made elsewhere (nox -s foreign_goldens).
pytestmark = pytest.mark.goldens

FP32_ZERO = load_matrix().tolerance_for("fp32", "zero2")


@pytest.fixture(scope="module")
def golden():  # type: ignore[no-untyped-def]
    return load_golden("regression", "fp32")


def _saved(record, directory: Path):  # type: ignore[no-untyped-def]
    stem = directory / "records" / "regression-cpu2-zero2-fp32"
    record.save(stem)
    return stem


def test_the_same_numbers_are_bit_identical(golden, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    change = record_change(golden, _saved(golden, tmp_path), FP32_ZERO, "deepspeed_0_19")
    assert change["change"] == "bit-identical" and change["max_abs_diff"] == 0.0
    assert change["first_difference"] is None and change["against"] == "deepspeed_0_19"


def test_a_change_inside_the_cell_tolerance_is_within_tolerance(golden, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    moved = copy.deepcopy(golden)
    name = next(iter(moved.state_dict))
    moved.state_dict[name].view(-1)[0] += FP32_ZERO.atol / 4  # a quarter of the absolute tolerance
    change = record_change(moved, _saved(golden, tmp_path), FP32_ZERO, "x")
    assert change["change"] == "within tolerance"
    assert change["first_difference"] == f"state_dict/{name}"
    assert 0 < change["max_abs_diff"] <= FP32_ZERO.atol / 4 * 1.01


def test_a_change_outside_the_tolerance_or_other_skipped_steps_diverges(golden, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    stem = _saved(golden, tmp_path)
    moved = copy.deepcopy(golden)
    moved.losses[3] += 0.5
    change = record_change(moved, stem, FP32_ZERO, "x")
    assert change["change"] == "diverged" and change["first_difference"] == "losses"
    assert change["max_abs_diff"] == pytest.approx(0.5)
    skipped = copy.deepcopy(golden)
    skipped.skipped_steps = [*skipped.skipped_steps, 99]
    assert record_change(skipped, stem, FP32_ZERO, "x")["change"] == "diverged"


def test_no_record_of_the_other_environment_is_said(golden, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    change = record_change(golden, tmp_path / "records" / "absent", FP32_ZERO, "x")
    assert change["change"] == "not compared" and change["note"]


def test_bit_for_bit_between_environments_holds_only_within_one_torch(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text(json.dumps({"environment": {"name": "a", "torch": "2.13.0+cpu"}}))
    assert same_torch(tmp_path, "2.13.0+cpu")
    assert not same_torch(tmp_path, "2.14.1")
    assert same_torch(tmp_path / "nowhere", "2.14.1")  # unknown: the stricter rule stays on
