"""A script whose Accelerator asks for fp16, for launches that say another precision: the
connector refuses it with a ConflictingSettingsError on every rank, before anything runs."""

from __future__ import annotations

from accelerate_core import Accelerator

Accelerator(mixed_precision="fp16")
print("unreachable: the conflict was not refused")
