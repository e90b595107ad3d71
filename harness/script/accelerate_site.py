"""The recording shim's entry in the processes `accelerate launch` starts (docs/script-mode.md).

`python -m harness script --implementation accelerate` launches a user's Hugging Face Accelerate
script with a temporary directory first on `PYTHONPATH` holding the `sitecustomize.py` below
(harness.script.script_launch writes it and deletes it when the launch ends, however it ends). Python
runs it at start-up in every process of the launch; when `ACCELERATE_CORE_RECORD_DIR` is set it
calls `activate()`, which imports nothing heavy: an import hook waits for the script's own import
of `accelerate.accelerator`, then harness.script.accelerate_recording watches its Accelerator.
The project's root is appended to `sys.path` (last: it never shadows the script's own modules),
and a `sitecustomize` of the environment's own, which this one shadows, is run after it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

ACCELERATOR_MODULE = "accelerate.accelerator"
SITECUSTOMIZE = (
    "# Written by python -m harness script (harness/script/script_launch.py); deleted when the launch ends.\n"
    "import os\n"
    "import sys\n"
    "if os.environ.get({variable!r}):\n"
    "    if {root!r} not in sys.path:\n"
    "        sys.path.append({root!r})\n"
    "    import harness.script.accelerate_site\n"
    "    harness.script.accelerate_site.activate()\n"
    "# The environment's own sitecustomize, if any, runs too (this one shadows it on sys.path).\n"
    "import importlib.machinery as _machinery\n"
    "import importlib.util as _util\n"
    "_here = os.path.dirname(os.path.abspath(__file__))\n"
    "_rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]\n"
    "_spec = _machinery.PathFinder.find_spec('sitecustomize', _rest)\n"
    "if _spec is not None and _spec.loader is not None:\n"
    "    _spec.loader.exec_module(_util.module_from_spec(_spec))\n"
)


class _WhenImported(importlib.abc.MetaPathFinder):
    """Finds `accelerate.accelerator` as the other finders would, and calls `watch` on its
    Accelerator as soon as the module has run."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != ACCELERATOR_MODULE:
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            from harness.script.accelerate_recording import watch

            watch(module.Accelerator)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def activate() -> None:
    """Watch every Accelerator of this process (called by the sitecustomize, when recording)."""
    module = sys.modules.get(ACCELERATOR_MODULE)
    if module is not None:
        from harness.script.accelerate_recording import watch

        watch(module.Accelerator)
    elif not any(isinstance(f, _WhenImported) for f in sys.meta_path):
        sys.meta_path.insert(0, _WhenImported())
