"""The DeepSpeed behaviours the core reconciles, judged per release from their DeepSpeed-alone
reproductions (harness/versions/behaviours.py), and the core's gates that switch each patch on
only where the behaviour is present (accelerate_core/strategies/deepspeed/compat.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.versions.behaviours import BY_KEY, Observation, classify, read_behaviours, write_behaviours
from tests.run_if import run_if

SCALAR = BY_KEY["zero_dim_broadcast"]
LINEAR = BY_KEY["zero3_linear_left_swapped"]
BROKEN = "RuntimeError: self.dim() cannot be 0 to view Float as Byte"


def test_a_signature_error_on_any_stage_is_present_and_a_gate_that_is_on_agrees() -> None:
    seen = [Observation(SCALAR.key, 1, True, gate_on=True),
            Observation(SCALAR.key, 2, False, BROKEN, gate_on=True)]
    result = classify(SCALAR, seen)
    assert result.verdict == "present" and result.gate_agrees is True
    assert "zero1: fixed" in result.evidence and "zero2: present" in result.evidence


def test_clean_runs_on_every_stage_are_fixed_and_a_gate_left_on_disagrees() -> None:
    seen = [Observation(SCALAR.key, s, True, gate_on=True) for s in SCALAR.stages]
    result = classify(SCALAR, seen)
    assert result.verdict == "fixed" and result.gate_agrees is False
    off = classify(SCALAR, [Observation(SCALAR.key, s, True, gate_on=False) for s in SCALAR.stages])
    assert off.gate_agrees is True


def test_another_failure_proves_neither_and_names_the_error() -> None:
    seen = [Observation(SCALAR.key, 1, False, "IndexError: list index out of range", gate_on=True)]
    result = classify(SCALAR, seen)
    assert result.verdict == "other" and result.gate_agrees is None
    assert "IndexError: list index out of range" in result.evidence
    assert classify(SCALAR, []).verdict == "not run"


def test_a_side_effect_probe_is_present_when_the_effect_is_seen() -> None:
    assert classify(LINEAR, [Observation(LINEAR.key, 3, True, side_effect=True)]).verdict == "present"
    assert classify(LINEAR, [Observation(LINEAR.key, 3, True, side_effect=False)]).verdict == "fixed"


def test_behaviours_file_round_trips(tmp_path: Path) -> None:
    result = classify(SCALAR, [Observation(SCALAR.key, 1, False, BROKEN, gate_on=True)])
    write_behaviours(tmp_path, {"deepspeed": "0.19.8"}, [result])
    data = read_behaviours(tmp_path)
    assert data is not None and data["behaviours"][0]["verdict"] == "present"
    assert read_behaviours(tmp_path / "absent") is None


def test_the_zero_dim_patch_stays_off_where_the_release_no_longer_views_as_bytes() -> None:
    """A stand-in for a release whose broadcast handles 0-dim tensors: the gate reads its code and
    leaves the class as it is, so that release's own behaviour shows."""
    from accelerate_core.strategies.deepspeed.compat import _broadcast_views_parameters_as_bytes, _patched

    class Engine:
        def _broadcast_model(self) -> None:
            return None  # no byte view: nothing to reconcile

    original = Engine.__dict__["_broadcast_model"]
    assert not _broadcast_views_parameters_as_bytes(original)
    gate = _broadcast_views_parameters_as_bytes
    with _patched(Engine, "_broadcast_model", lambda fn: (lambda self: "patched"), gate):
        assert Engine.__dict__["_broadcast_model"] is original


@pytest.mark.deepspeed
@run_if(deepspeed=True)
def test_with_the_installed_deepspeed_the_gates_find_what_its_reproductions_show() -> None:
    """DeepSpeed 0.19.8 has both behaviours (tests/harness/rank/test_loop.py reproduces them with
    DeepSpeed alone): both gates are on. Other releases: docs/versions.md, from the sweep."""
    from importlib import metadata

    from accelerate_core.strategies.deepspeed.compat import (
        zero3_hooks_miss_dataclass_outputs,
        zero_dim_reconciliation_applies,
    )

    if metadata.version("deepspeed") != "0.19.8":
        pytest.skip("the behaviours of other releases are the version sweep's (nox -s versions)")
    assert zero_dim_reconciliation_applies()
    assert zero3_hooks_miss_dataclass_outputs()
