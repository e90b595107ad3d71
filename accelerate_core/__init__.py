"""accelerate_core: one training loop over a single device, DDP and DeepSpeed ZeRO.

Importing it never imports deepspeed (see imports.py); DeepSpeed code is loaded only when a
DeepSpeed strategy is asked for.
"""

from __future__ import annotations

from accelerate_core.accelerator import Accelerator
from accelerate_core.deepspeed_plugin import DeepSpeedPlugin
from accelerate_core.errors import (
    AccelerateCoreError,
    ConflictingSettingsError,
    InvalidSettingError,
    MissingDependencyError,
    UnsupportedObjectError,
    UnsupportedPrecisionError,
)
from accelerate_core.imports import is_deepspeed_available

__version__ = "0.1.0"

__all__ = [
    "AccelerateCoreError",
    "Accelerator",
    "ConflictingSettingsError",
    "DeepSpeedPlugin",
    "InvalidSettingError",
    "MissingDependencyError",
    "UnsupportedObjectError",
    "UnsupportedPrecisionError",
    "__version__",
    "is_deepspeed_available",
]
