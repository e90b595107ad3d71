"""Tolerances belong to the matrix they are read from: parsed with it, validated at load, and
the ones a run judges with (a second matrix file with other tolerances changes a verdict)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from harness.errors import ToleranceError
from harness.golden.golden_store import load_golden
from harness.judge.cell_verdict import judge_record
from harness.judge.outcome import Status
from harness.paths import MATRIX_PATH
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from tests.harness.runner_helpers import SINGLE_CPU_EVIDENCE

# Reads the goldens: run again against goldens made elsewhere (nox -s foreign_goldens).
pytestmark = pytest.mark.goldens


def test_tolerances_from_the_matrix_have_reasons() -> None:
    matrix = load_matrix()
    for precision in ("fp32", "fp16", "bf16"):
        for strategy in ("single", "ddp", "zero1", "zero2", "zero3"):
            tol = matrix.tolerance_for(precision, strategy)
            assert tol.family == ("plain" if strategy in ("single", "ddp") else "zero")
            assert len(tol.reason) > 40 and tol.rtol > 0 and tol.atol > 0
    fp32 = matrix.tolerance_for("fp32", "ddp")
    assert (fp32.rtol, fp32.atol) == (1.3e-6, 1e-5)  # torch.testing's fp32 default, as promised


def _matrix_with(tmp_path: Path, tolerances: str) -> Path:
    text = MATRIX_PATH.read_text()
    head = text[: text.index("[tolerances]")]
    path = tmp_path / "matrix.toml"
    path.write_text(head + tolerances)
    return path


def test_a_malformed_or_missing_tolerance_is_named(tmp_path: Path) -> None:
    no_reason = _matrix_with(tmp_path, '[tolerances.fp32.plain]\nrtol = 1e-6\natol = 1e-5\n'
                                       'reason = ""\n')
    with pytest.raises(ToleranceError, match="reason"):
        load_matrix(no_reason)  # at load, before any cell runs
    only_fp32 = _matrix_with(tmp_path, '[tolerances.fp32.plain]\nrtol = 1e-6\natol = 1e-5\n'
                                       'reason = "r r r r r"\n')
    with pytest.raises(ToleranceError, match=r"\[tolerances.fp16.plain\].*missing"):
        load_matrix(only_fp32)  # its zero cells could not be judged: said at load, not mid-run
    with pytest.raises(ToleranceError, match="'hsdp'"):  # a strategy the matrix does not know
        load_matrix().tolerance_for("fp32", "hsdp")
    bad_family = _matrix_with(tmp_path, '[tolerances.fp32.fsdp]\nrtol = 1e-6\natol = 1e-5\n'
                                        'reason = "r r r r"\n')
    with pytest.raises(ToleranceError, match="not a strategy family"):
        load_matrix(bad_family)


def test_the_matrix_in_use_decides_the_verdict(tmp_path: Path) -> None:
    # A record 2e-6 off the golden in one weight: inside the repository's fp32 tolerance, outside
    # a matrix whose fp32 tolerance is ten times tighter. The judge must use the matrix it is given.
    cell = Cell("regression", "cpu", 1, "single", "fp32")
    record = copy.deepcopy(load_golden("regression", "fp32"))
    record.state_dict["weight"] += 2e-6
    record.meta["evidence"] = dict(SINGLE_CPU_EVIDENCE)  # the judge checks it before numbers
    record.save(tmp_path / "records" / cell.id)
    tight = _matrix_with(tmp_path, "".join(
        f'[tolerances.{precision}.{family}]\nrtol = 0.0\natol = 1e-7\nreason = "far tighter, for this test"\n'
        for precision in ("fp32", "fp16", "bf16") for family in ("plain", "zero")))
    verdicts = {}
    for name, matrix in (("repository", load_matrix()), ("tight", load_matrix(tight))):
        result = judge_record(cell, tmp_path / "records" / cell.id, duration_s=0.0, emulated=False,
                              env_name="t", matrix=matrix)
        verdicts[name] = result.status
    assert verdicts == {"repository": Status.PASSED, "tight": Status.FAILED}
