"""The implementations of the Accelerator API the matrix judges: the `implementation` axis.

`core` is this project's own accelerate_core (the default; absent from cell ids); `accelerate` is
Hugging Face Accelerate, the library the core imitates. Each runs the same user loop on every
rank and is judged against the same goldens and tolerances (docs/implementations.md).

This module is light on purpose: the parent process validates the axis and decides availability
without importing any implementation.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from harness.spec.cell import CORE


@dataclass(frozen=True)
class Implementation:
    name: str  # [a-z0-9_]+: the axis value and the cell id's suffix
    package: str  # the import that must be installed for its cells to run
    install_hint: str  # how to install it, for a skip's reason


KNOWN: dict[str, Implementation] = {
    CORE: Implementation(CORE, "accelerate_core", "it ships with this project"),
    "accelerate": Implementation("accelerate", "accelerate", 'pip install -e ".[accelerate]"'),
}


def names() -> tuple[str, ...]:
    return tuple(KNOWN)


def is_installed(name: str) -> bool:
    return importlib.util.find_spec(KNOWN[name].package) is not None
