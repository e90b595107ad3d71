"""The 16-bit-copy entries (harness/sensitivity/half_precision.py): each acts only where a 16-bit
copy exists, so its affected cells are fp16/bf16 cells of the backends whose code it patches, and
its patch rounds to the run's own 16-bit dtype (checked without launching; that every patch still
applies is tests/harness/sensitivity/test_sensitivity.py's)."""

from __future__ import annotations

import pytest

from harness.plan.matrix import load_matrix
from harness.plan.selection import keyword_matches
from harness.sensitivity.bug import Bug
from harness.sensitivity.half_precision import HALF_PRECISION_BUGS

# The file each backend's numbers go through: amp (single, ddp) or FSDP's own precision/strategy.
_BACKENDS_OF_FILE = {"precision/amp.py": {"single", "ddp"},
                     "strategies/single_device.py": {"single", "ddp"},
                     "precision/fsdp.py": {"fsdp"},
                     "strategies/fsdp/strategy.py": {"fsdp"}}


@pytest.mark.parametrize("bug", HALF_PRECISION_BUGS, ids=lambda bug: bug.name)
def test_every_affected_cell_is_a_half_precision_cell_of_the_patched_backend(bug: Bug) -> None:
    matrix = load_matrix()
    affected = [cell for cell in matrix.all_cells() if keyword_matches(cell, bug.affected)]
    assert affected, f"{bug.name}: -k {bug.affected!r} selects no cell"
    assert {cell.precision for cell in affected} <= {"fp16", "bf16"}, bug.name
    assert {cell.strategy for cell in affected} <= _BACKENDS_OF_FILE[bug.file], bug.name


@pytest.mark.parametrize("bug", HALF_PRECISION_BUGS, ids=lambda bug: bug.name)
def test_the_patch_rounds_to_the_runs_own_16_bit_dtype_never_a_fixed_one(bug: Bug) -> None:
    """A patch that rounded to a hard-coded dtype would round a bf16 run to fp16 (or act where the
    precision has no 16-bit dtype): the rounding must follow the precision object's own dtype."""
    assert "torch.bfloat16" not in bug.replace and "torch.float16" not in bug.replace, bug.name
    own_dtype = ("self.dtype", "param_dtype", 'getattr(self.precision, "dtype", None)')
    assert any(spelling in bug.replace for spelling in own_dtype), bug.name
