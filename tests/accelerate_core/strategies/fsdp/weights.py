"""Assertions the FSDP2 test modules share: a state dict of plain CPU tensors against a plain
PyTorch reference, with torch's fp32 tolerance by default."""

from __future__ import annotations

from typing import Any

import torch
from torch.testing import assert_close

# torch.testing's fp32 defaults, written out: the tolerance every fp32 FSDP2 check uses.
FP32: dict[str, Any] = {"rtol": 1.3e-6, "atol": 1e-5}


def assert_weights(state: dict[str, torch.Tensor], reference: dict[str, torch.Tensor],
                   **tolerance: Any) -> None:
    """Same names; each value a plain CPU tensor (not a DTensor) close to the reference's."""
    assert state.keys() == reference.keys()
    for key, value in state.items():
        assert value.device.type == "cpu" and type(value) is torch.Tensor, key  # plain, not DTensor
        try:
            assert_close(value, reference[key], **tolerance)
        except AssertionError as error:
            raise AssertionError(f"{key}: {error}") from None
