"""Run a subprocess as if deepspeed were not installed, without uninstalling it.

A `sitecustomize` module on PYTHONPATH wraps every import finder so that `deepspeed` (and its
submodules) is not found: `import deepspeed` raises ModuleNotFoundError and
`importlib.util.find_spec("deepspeed")` returns None, exactly as in an environment without it.
Child processes inherit PYTHONPATH, so every rank of a launched run sees the same.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

_SITECUSTOMIZE = '''
import sys


class _HideDeepSpeed:
    """Wraps one meta-path finder; answers "not found" for deepspeed, defers otherwise."""

    def __init__(self, inner):
        self._inner = inner

    def find_spec(self, name, path=None, target=None):
        if name == "deepspeed" or name.startswith("deepspeed."):
            return None
        find = getattr(self._inner, "find_spec", None)
        return None if find is None else find(name, path, target)

    def __getattr__(self, attribute):
        return getattr(self._inner, attribute)


sys.meta_path[:] = [_HideDeepSpeed(finder) for finder in sys.meta_path]
for _name in [m for m in sys.modules if m == "deepspeed" or m.startswith("deepspeed.")]:
    del sys.modules[_name]
'''


def environ_without_deepspeed(directory: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of `base` (default: os.environ) whose Python processes cannot find deepspeed.

    `directory` receives the sitecustomize.py; it is put first on PYTHONPATH.
    """
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(directory), env.get("PYTHONPATH", "")) if p)
    return env
