"""Which DeepSpeed releases the core supports, and the refusal of the others at use.

The range is what the harness proved, not what installs: DeepSpeed 0.16-0.18 install beside
torch 2.13 and import fine, then train wrongly or fail inside the engine (the table below, from
the CPU ZeRO cells of the matrix, 45 per release: 3 stages x 3 precisions x 5 tasks on 2
processes). A release outside the range is refused when a DeepSpeed strategy is asked for,
before anything is patched or initialised, with the measured reason; the version is read from
the installed metadata, so the check never imports deepspeed.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from importlib import metadata

from accelerate_core.errors import MissingDependencyError, explain

MINIMUM = (0, 19, 8)
NEWEST_TESTED_SERIES = (0, 19)
SUPPORTED_RANGE = ">=0.19.8,<0.20"  # as in pyproject.toml's `deepspeed` extra


class UnsupportedDeepSpeedError(MissingDependencyError):
    """The installed deepspeed is a release the core is known not to work with."""


@dataclass(frozen=True)
class ReleaseFinding:
    release: str
    supported: bool
    finding: str  # what the CPU ZeRO cells of the matrix showed with torch 2.13.0


FINDINGS = (
    ReleaseFinding("0.19.8", True, "45 of 45 CPU ZeRO cells pass"),
    ReleaseFinding("0.18.9", False, "6 pass, 9 fail, 30 error inside the engine (RuntimeError: Output 0 "
                   "of Split is a view and is being modified inplace)"),
    ReleaseFinding("0.17.6", False, "17 pass, 10 fail, 18 error inside the engine (IndexError: list "
                   "index out of range)"),
    ReleaseFinding("0.16.9", False, "30 pass, 15 fail silently: learning rates differ from optimizer step 1 "
                   "(classifier) and ZeRO-3 runs diverge, some to 1e20-1e37"),
)


def parse_release(version: str) -> tuple[int, ...]:
    """'0.19.8' -> (0, 19, 8); local or pre-release tails ('+cu121', 'rc1', '.dev0') are ignored."""
    parts = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    if not parts:
        return (0,)
    return tuple(int(p) for p in parts.groups() if p is not None)


def installed_deepspeed_version() -> str | None:
    try:
        return metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        return None


def check_deepspeed_release(version: str) -> None:
    """Refuse a release below the supported range; warn once about one newer than any tested."""
    release = parse_release(version)
    if release < MINIMUM:
        series = ".".join(str(p) for p in release[:2])
        known = next((f for f in FINDINGS if f.release.startswith(series + ".")), None)
        why = (f"the core does not work with it: {known.finding} (deepspeed {known.release})" if known
               else "the core is known to give wrong answers or fail inside the engine on releases "
                    "before 0.19.8")
        raise UnsupportedDeepSpeedError(explain(
            f"deepspeed {version} is installed", why, f"deepspeed{SUPPORTED_RANGE}",
            f'pip install "deepspeed{SUPPORTED_RANGE}"  (or: pip install -e ".[deepspeed]")'))
    if release[:2] > NEWEST_TESTED_SERIES:
        warnings.warn(
            f"deepspeed {version} is newer than any release the core was tested with "
            f"({SUPPORTED_RANGE}); run the matrix (python -m harness run -m deepspeed) before trusting it",
            UserWarning, stacklevel=3)
