"""The kernel-level calibration variant (harness.calibrate.child_reference): the reference run in
a child process whose torch, oneDNN and MKL are capped at AVX2. What the child's torch ran with is
read back from it, never assumed: on an AVX2-only CPU the cap changes nothing, on an AVX-512 one
it changes kernels; either way the child must not run above the cap."""

from __future__ import annotations

import pytest

from harness.calibrate.child_reference import AVX2_KERNELS, ChildReferenceError, child_records
from harness.golden.reference import ReferenceInputs, train_reference
from harness.tasks import get_task

pytestmark = pytest.mark.goldens


def test_the_child_runs_the_reference_under_the_caps_and_says_what_its_torch_ran() -> None:
    ran = child_records([("regression", "fp32"), ("regression", "bf16")], dict(AVX2_KERNELS))
    assert ran.cpu_capability in ("AVX2", "DEFAULT")  # capped: never AVX512 (or above)
    task = get_task("regression")
    for precision in ("fp32", "bf16"):
        here = train_reference(task, precision, inputs=ReferenceInputs.of(task)).tensors()
        there = ran.records[("regression", precision)].tensors()
        assert there.keys() == here.keys()
        assert all(there[k].dtype == here[k].dtype and there[k].shape == here[k].shape for k in here)


def test_a_child_that_fails_is_an_error_that_says_why() -> None:
    with pytest.raises(ChildReferenceError, match="no_such_task"):
        child_records([("no_such_task", "fp32")], dict(AVX2_KERNELS))
