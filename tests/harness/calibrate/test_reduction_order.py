"""The reduction-order reference and the value-for-value comparison behind calibrate
--exact-tier (harness.calibrate.reduction_order): equal to itself, one ulp or a missing quantity
named."""

from __future__ import annotations

import copy

import torch

from harness.calibrate.reduction_order import differing_quantities, reduction_order_reference
from harness.plan.cell import Cell

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
