"""accelerate_core: one training loop over a single device, DDP, FSDP2 and DeepSpeed ZeRO.

Importing it never imports deepspeed (see imports.py); DeepSpeed code is loaded only when a
DeepSpeed strategy is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelerate_core.deepspeed_plugin import DeepSpeedPlugin
from accelerate_core.errors import (
    AccelerateCoreError,
    ConflictingSettingsError,
    InvalidSettingError,
    MissingDependencyError,
    UnsupportedObjectError,
    UnsupportedPrecisionError,
)
from accelerate_core.fsdp_plugin import FSDPPlugin
from accelerate_core.imports import is_deepspeed_available

if TYPE_CHECKING:
    from accelerate_core.accelerator import Accelerator

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Accelerator imports torch (2 s or more); loading it on first use keeps the CLI's --help,
    # its flag errors and `accelerate-core env` fast. `from accelerate_core import Accelerator`
    # works as before.
    if name == "Accelerator":
        from accelerate_core.accelerator import Accelerator

        return Accelerator
    raise AttributeError(f"module 'accelerate_core' has no attribute {name!r}")


__all__ = [
    "AccelerateCoreError",
    "Accelerator",
    "ConflictingSettingsError",
    "DeepSpeedPlugin",
    "FSDPPlugin",
    "InvalidSettingError",
    "MissingDependencyError",
    "UnsupportedObjectError",
    "UnsupportedPrecisionError",
    "__version__",
    "is_deepspeed_available",
]
