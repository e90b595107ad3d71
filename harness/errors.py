"""The harness's errors: one family, each kind with its exit code, and one `explain`.

Every message says what was given, why it is wrong, what is valid and how to fix it; the CLI
prints it without a traceback and exits with the error's `exit_code`. Imports nothing (the
goldens' side of the harness must not load accelerate_core, and every phase may raise these).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

EXIT_FAILED = 1  # something was checked and did not hold
EXIT_USAGE = 2  # bad input: the command line or a file it names


def explain(given: str, why: str, valid: str | Iterable[str], fix: str) -> str:
    if not isinstance(valid, str):
        valid = ", ".join(repr(v) for v in valid)
    return f"{given}: {why}. Valid: {valid}. Fix: {fix}"


class HarnessError(Exception):
    """Base of every error the harness raises on purpose."""

    exit_code: ClassVar[int] = EXIT_USAGE


class UsageError(HarnessError):
    """Bad input on the command line."""


class MatrixError(HarnessError, ValueError):
    """matrix.toml (or the file given with --matrix) is missing, malformed or inconsistent."""


class SelectionError(HarnessError, ValueError):
    """A -k or -m expression does not parse."""


class ToleranceError(HarnessError, ValueError):
    """matrix.toml has no usable tolerance for a precision and strategy family."""


class RecordError(HarnessError):
    """A record file is missing, truncated or does not agree with its JSON."""


class GoldenError(HarnessError):
    """A golden is missing, truncated, tampered with, or made for another task definition."""


class RegenerationTableError(HarnessError, ValueError):
    """The goldens' regeneration table is missing an entry or has a malformed one."""


class GenerationError(HarnessError, RuntimeError):
    """The child process that makes goldens failed; its output is in the message."""

    exit_code: ClassVar[int] = EXIT_FAILED


class ReportDirError(HarnessError, OSError):
    """The report directory cannot be created or written."""
