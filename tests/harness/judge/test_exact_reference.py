"""The exact tier's comparison (harness.judge.exact_reference) and its place in the verdict: a
record value-for-value equal to the reduction-order reference passes it; one ulp anywhere fails
the cell, with the quantity named, even where every toleranced comparison passes."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from harness.judge.cell_verdict import judge_record
from harness.judge.exact_reference import differing_quantities, reduction_order_reference
from harness.judge.outcome import Failure, Status
from harness.paths import MATRIX_PATH
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from tests.harness.runner_helpers import SINGLE_CPU_EVIDENCE

# The toleranced comparisons read the goldens (moved on purpose under nox -s foreign_goldens);
# the exact one never does.
pytestmark = pytest.mark.goldens

CELL = Cell.from_id("regression-cpu1-single-fp32")


def _one_ulp_up(record: object) -> str:
    name = sorted(record.state_dict)[0]  # type: ignore[attr-defined]
    flat = record.state_dict[name].view(-1)  # type: ignore[attr-defined]
    flat[0] = torch.nextafter(flat[0], torch.tensor(float("inf")))
    return f"state_dict/{name}"


def test_the_reference_equals_itself_and_one_ulp_or_a_missing_quantity_is_named() -> None:
    reference = reduction_order_reference(CELL, "regression")
    assert differing_quantities(copy.deepcopy(reference), reference) == {}
    moved = copy.deepcopy(reference)
    name = _one_ulp_up(moved)
    (elements, largest), = differing_quantities(moved, reference).values()
    assert list(differing_quantities(moved, reference)) == [name] and elements == 1 and 0 < largest < 1e-6
    shorter = copy.deepcopy(reference)
    del shorter.state_dict[name.removeprefix("state_dict/")]
    assert differing_quantities(shorter, reference)[name][1] == float("inf")


def test_a_covered_cell_fails_on_one_ulp_that_every_tolerance_lets_through(tmp_path: Path) -> None:
    matrix_file = tmp_path / "matrix.toml"
    entry = ('[[exact_tier]]\ntask = ["regression"]\nstrategy = ["single"]\nenvironments = ["t"]\n'
             'reason = "for this test only"\n')
    matrix_file.write_text(MATRIX_PATH.read_text(encoding="utf-8") + "\n" + entry, encoding="utf-8")
    matrix = load_matrix(matrix_file)
    verdicts = {}
    for label, move in (("as computed", False), ("one ulp", True)):
        record = copy.deepcopy(reduction_order_reference(CELL, "regression"))
        if move:
            _one_ulp_up(record)
        record.meta = {"evidence": dict(SINGLE_CPU_EVIDENCE)}
        record.save(tmp_path / label / CELL.id)
        verdicts[label] = judge_record(CELL, tmp_path / label / CELL.id, duration_s=0.0, emulated=False,
                                       env_name="t", matrix=matrix)
    assert verdicts["as computed"].status == Status.PASSED
    failed = verdicts["one ulp"]
    assert failed.status == Status.FAILED and failed.failure == Failure.DIVERGENCE
    assert failed.reason.startswith("exact tier: 1 quantities differ") and "state_dict/" in failed.reason
    toleranced = [c for c in failed.comparisons if c.quantity != "exact_tier"]
    assert toleranced and all(c.ok for c in toleranced)
