"""The own-semantics check's noise and its file (harness.calibrate.semantics_noise,
harness.calibrate.semantics_file): which references the check judges by, what varies them, and
how the tolerances in force are written from that. Figures are asserted by their relations,
never by the bits this CPU computes."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.calibrate.semantics_file import (
    keep_wider,
    semantics_below_noise,
    semantics_tolerances,
    write_semantics_tolerances,
)
from harness.calibrate.semantics_noise import SemanticsNeed, measure_semantics, semantics_scope
from harness.plan.matrix import load_matrix
from harness.plan.semantics_tolerances import parse_semantics_tolerances

pytestmark = pytest.mark.goldens


def test_the_scope_is_the_half_precision_cells_the_reference_reproduces() -> None:
    scopes = {s.key: s for s in semantics_scope(load_matrix())}
    zero3 = scopes[("bf16", "sgd_accum", "splits_2_zero2")]
    assert "sgd_accum-cpu2-zero3-bf16" in zero3.cells and "sgd_accum-cpu2-zero2-bf16" in zero3.cells
    assert zero3.floor == load_matrix().tolerances.entries[("fp32", "zero")].atol
    assert ("bf16", "dropout", "splits_1") in scopes  # its single-process cell; not its 2-process ones
    assert not [k for k in scopes if k[0] == "fp32" or (k[1] == "batchnorm" and "zero" in k[2])]
    # ZeRO-2 and ZeRO-3 clip by norms taken apart: each its own reference, its own cells.
    assert scopes[("bf16", "clip_norm", "splits_2_zero2_clip_zero3")].cells == ("clip_norm-cpu2-zero3-bf16",)
    assert scopes[("bf16", "clip_norm", "splits_2_zero2_clip_zero12")].cells == ("clip_norm-cpu2-zero2-bf16",)


def test_every_reference_is_measured_under_each_variation_and_named() -> None:
    scopes = [s for s in semantics_scope(load_matrix()) if s.key[1] == "lm" and s.key[0] == "fp16"]
    needs = measure_semantics(scopes)
    assert [n.key for n in needs] == [s.key for s in scopes]
    for need in needs:
        assert need.need >= 0 and (need.variant in ("threads_x2", "exact_accumulation", "avx2_kernels")
                                   if need.need > 0 else need.variant == "")


def test_an_entry_is_the_safety_factor_times_the_noise_never_below_the_fp32_floor(tmp_path: Path) -> None:
    scopes = [s for s in semantics_scope(load_matrix())
              if s.key[1] in ("lm", "sgd_accum") and s.key[0] == "bf16"]
    needs = [SemanticsNeed(s.key, 1.2e-3, "threads_x2", "w") if s.key[1] == "lm"
             else SemanticsNeed(s.key, 0.0, "", "") for s in scopes]
    entries = {e.key: e for e in semantics_tolerances(needs, scopes, safety=2.0)}
    for scope in scopes:
        entry = entries[scope.key]
        assert entry.atol == (2.4e-3 if scope.key[1] == "lm" else scope.floor) and entry.rtol == 0
    path = tmp_path / "semantics_tolerances.toml"
    write_semantics_tolerances(path, entries.values(), 2.0)
    assert parse_semantics_tolerances(tmp_path / "matrix.toml", path.name) == entries
    # another machine's larger noise is kept; its smaller one is not
    wider = [SemanticsNeed(n.key, 5e-3 if n.key[1] == "sgd_accum" else 1e-4, "avx2_kernels", "w")
             for n in needs]
    merged, machines = keep_wider(semantics_tolerances(wider, scopes, 2.0), path, scopes, 2.0)
    by_key = {e.key: e for e in merged}
    assert all(by_key[s.key].atol == (1e-2 if s.key[1] == "sgd_accum" else 2.4e-3) for s in scopes)
    assert machines


def test_noise_above_an_atol_in_force_is_reported() -> None:
    table = load_matrix().tolerances
    key = ("bf16", "sgd_accum", "splits_2_zero2")
    atol = table.semantics[key].atol
    assert semantics_below_noise([SemanticsNeed(key, atol / 2, "threads_x2", "w")], table) == []
    [line] = semantics_below_noise([SemanticsNeed(key, atol * 3, "threads_x2", "w")], table)
    assert "above the atol" in line and "sgd_accum" in line
