"""The implementations of the Accelerator API the matrix judges: the `implementation` axis.

`core` is this project's own accelerate_core (the default; absent from cell ids); `accelerate` is
Hugging Face Accelerate, the library the core imitates. Each runs the same user loop on every
rank and is judged against the same goldens and tolerances (docs/implementations.md).

This module is light on purpose: the parent process validates the axis and decides availability
without importing any implementation.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.plan.cell import CORE

if TYPE_CHECKING:
    from harness.implementations.base import Adapter


@dataclass(frozen=True)
class Implementation:
    name: str  # [a-z0-9_]+: the axis value and the cell id's suffix
    package: str  # the import that must be installed for its cells to run
    install_hint: str  # how to install it, for a skip's reason
    adapter: str  # "module:Class" of its Adapter (harness.implementations.base), imported on use


KNOWN: dict[str, Implementation] = {
    CORE: Implementation(CORE, "accelerate_core", "it ships with this project",
                         "harness.implementations.core:CoreAdapter"),
    "accelerate": Implementation("accelerate", "accelerate", 'pip install -e ".[accelerate]"',
                                 "harness.implementations.accelerate:AccelerateAdapter"),
}
_adapters: dict[str, Adapter] = {}


def register(implementation: Implementation) -> None:
    """Add an implementation (a third one: Lightning Fabric, a user's own trainer); its name
    becomes a value of the implementation axis. Register it in every process that builds or
    judges its cells (a module the matrix's `tasks = [...]` imports does both)."""
    KNOWN[implementation.name] = implementation
    _adapters.pop(implementation.name, None)


def adapter_for(name: str) -> Adapter:
    """The adapter of `name`, made once per process."""
    if name not in _adapters:
        module, _, cls = KNOWN[name].adapter.partition(":")
        _adapters[name] = getattr(importlib.import_module(module), cls)()
    return _adapters[name]


def names() -> tuple[str, ...]:
    return tuple(KNOWN)


def is_installed(name: str) -> bool:
    return importlib.util.find_spec(KNOWN[name].package) is not None
