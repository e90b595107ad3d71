"""fp32: no autocast, no loss scaling (the base class's behaviour, under its own name)."""

from __future__ import annotations

from accelerate_core.precision.base import Precision


class FP32Precision(Precision):
    mixed_precision = "no"
