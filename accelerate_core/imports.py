"""Availability checks for optional packages that never import them.

`import accelerate_core` must not import deepspeed (it costs about a second and may be absent);
these checks ask the import system whether it could, without doing it.
"""

from __future__ import annotations

import functools
import importlib.util

from accelerate_core.deepspeed_support import check_deepspeed_release, installed_deepspeed_version
from accelerate_core.errors import MissingDependencyError, explain

DEEPSPEED_INSTALL_HINT = 'pip install deepspeed  (or: pip install "accelerate-core[deepspeed]")'


@functools.cache
def is_deepspeed_available() -> bool:
    """True when `import deepspeed` would find a package (it is not imported here)."""
    return importlib.util.find_spec("deepspeed") is not None


def require_deepspeed(what: str = "DeepSpeed") -> None:
    """Raise MissingDependencyError with the install command when deepspeed is absent, and
    UnsupportedDeepSpeedError when it is a release the core does not work with."""
    version = installed_deepspeed_version() if is_deepspeed_available() else None
    if version is not None:
        check_deepspeed_release(version)
        return
    if not is_deepspeed_available():
        raise MissingDependencyError(
            explain(
                f"{what} was requested",
                "the 'deepspeed' package is not installed in this Python environment",
                "backends 'single' and 'ddp' work without it",
                f"install it with `{DEEPSPEED_INSTALL_HINT}`, or choose another backend",
            )
        )
