"""Exception types of accelerate_core, one per kind of mistake.

Every message follows one shape, built by :func:`explain`: what was given, why it is wrong,
what is valid and how to fix it. Callers catch the kind they care about; the CLI catches
:class:`AccelerateCoreError` and prints the message without a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable


def explain(given: str, why: str, valid: str | Iterable[str], fix: str) -> str:
    """Format an error message that a user can act on without reading the source."""
    if not isinstance(valid, str):
        valid = ", ".join(repr(v) for v in valid)
    return f"{given}: {why}. Valid: {valid}. Fix: {fix}"


class AccelerateCoreError(Exception):
    """Base class of every error the core raises on purpose."""


class InvalidSettingError(AccelerateCoreError, ValueError):
    """A single setting has a value outside its valid set (e.g. mixed_precision='fp8')."""


class ConflictingSettingsError(AccelerateCoreError, ValueError):
    """Two settings disagree (e.g. fp16=True with mixed_precision='bf16', or an Accelerator
    argument that contradicts what `accelerate-core launch` was told)."""


class UnsupportedObjectError(AccelerateCoreError, TypeError):
    """`prepare` was given an object it does not know how to prepare."""


class MissingDependencyError(AccelerateCoreError, ImportError):
    """An optional package (deepspeed) is needed for what was asked and is not installed."""


class UnsupportedPrecisionError(AccelerateCoreError, RuntimeError):
    """The device/backend cannot run the requested precision (e.g. DeepSpeed fp16 on a CPU
    without native fp16 support, unless the labelled emulation is opted into)."""


class CollectiveMisuseError(AccelerateCoreError, RuntimeError):
    """A collective call was made in a way that would hang (e.g. get_state_dict under ZeRO-3
    called on the main process only)."""


class ConfigFileError(AccelerateCoreError, ValueError):
    """A config file is unreadable, has unknown keys, bad values or an unknown version."""
