"""Per-quantity tolerances (matrix.toml [tolerances.<precision>.<family>.<kind>]): parsed and
validated with the rest, and used by the comparison for that kind only."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch

from harness.errors import ToleranceError
from harness.golden.golden_store import load_golden
from harness.judge.compare import compare_record
from harness.plan.matrix import load_matrix
from harness.plan.tolerances import parse_tolerances

# Reads the goldens: run again against goldens made elsewhere (nox -s foreign_goldens).
pytestmark = pytest.mark.goldens

ENTRY = {"rtol": 1e-3, "atol": 2e-2, "reason": "entry"}


def test_a_kind_gets_its_own_tolerance_and_the_others_the_entrys() -> None:
    table = parse_tolerances(Path("m.toml"), {"fp16": {"plain": {
        **ENTRY, "losses": {"rtol": 1e-3, "atol": 1e-4, "reason": "losses are closer"}}}})
    tol = table.for_cell("fp16", "ddp")
    assert (tol.for_quantity("losses").atol, tol.for_quantity("losses").reason) == (1e-4, "losses are closer")
    assert tol.for_quantity("eval/logits") is tol and tol.for_quantity("state_dict/w") is tol


def test_an_unknown_key_or_an_incomplete_kind_is_named() -> None:
    with pytest.raises(ToleranceError, match=r"key\(s\) 'logits'.*eval"):
        parse_tolerances(Path("m.toml"), {"fp16": {"plain": {**ENTRY, "logits": dict(ENTRY)}}})
    with pytest.raises(ToleranceError, match=r"\[tolerances\.fp16\.plain\.losses\]"):
        parse_tolerances(Path("m.toml"), {"fp16": {"plain": {**ENTRY, "losses": {"rtol": 1e-3}}}})


def test_the_matrix_losses_tolerance_catches_a_loss_shift_the_entry_would_pass() -> None:
    """A 2% shift of every fp16 loss: inside the entry's atol 2e-2 for these small losses, far
    outside the measured losses tolerance."""
    golden = load_golden("regression", "fp16")
    record = copy.deepcopy(golden)
    record.losses = [x * 1.02 for x in golden.losses]
    tolerance = load_matrix().tolerance_for("fp16", "ddp")
    losses = next(c for c in compare_record(record, golden, tolerance) if c.quantity == "losses")
    assert not losses.ok and losses.atol == tolerance.for_quantity("losses").atol
    entry_only = dataclasses.replace(tolerance, quantities={})
    assert next(c for c in compare_record(record, golden, entry_only) if c.quantity == "losses").ok
    assert max(abs(x) for x in golden.losses) < 0.5 and torch.tensor(golden.losses).abs().min() > 0
