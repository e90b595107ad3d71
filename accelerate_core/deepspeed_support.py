"""Which DeepSpeed releases the core supports, and the refusal of the others at use.

The range is what the harness proved, not what installs: DeepSpeed 0.16-0.18 install beside
torch 2.13 and import fine, then train wrongly or fail inside the engine (the table below, from
the CPU ZeRO cells of the matrix in the version sweep, 90 per release: 3 stages x 3 precisions x
10 tasks on 2 processes). A release outside the range is refused when a DeepSpeed strategy is asked for,
before anything is patched or initialised, with the measured reason; the version is read from
the installed metadata, so the check never imports deepspeed.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from importlib import metadata

from accelerate_core.errors import MissingDependencyError, explain

MINIMUM = (0, 19, 4)
NEWEST_TESTED_SERIES = (0, 19)
SUPPORTED_RANGE = ">=0.19.4,<0.20"  # as in pyproject.toml's `deepspeed` extra
# Set to 1 to run an unsupported release anyway, with a warning instead of the refusal: how the
# version sweep (`nox -s versions`, docs/versions.md) measures what a release outside the range
# does, so the range can be widened when a release is shown to work. Not for training you trust.
ALLOW_UNSUPPORTED_ENV = "ACCELERATE_CORE_ALLOW_UNSUPPORTED_DEEPSPEED"


class UnsupportedDeepSpeedError(MissingDependencyError):
    """The installed deepspeed is a release the core is known not to work with."""


@dataclass(frozen=True)
class ReleaseFinding:
    release: str
    supported: bool
    finding: str  # what the CPU ZeRO cells of the matrix showed with torch 2.13.0


FINDINGS = (
    ReleaseFinding("0.19.8", True, "90 of 90 CPU ZeRO cells as expected: 72 passed, 18 fail as declared "
                   "(plain BatchNorm and dropout on 2 ranks) (version sweep, 10 tasks)"),
    *(ReleaseFinding(release, True, "90 of 90 CPU ZeRO cells as expected, every record bit-identical to "
                     "0.19.8's (version sweep)") for release in ("0.19.7", "0.19.6", "0.19.5", "0.19.4")),
    ReleaseFinding("0.19.0", False, "48 of 90 CPU ZeRO cells pass and 12 fail as declared; it has no "
                   "managed_gradient_accumulation (0.19.4 added it; 0.19.1-0.19.3 have none either), so "
                   "with gradient accumulation the engine counts micro-steps itself and applies only every "
                   "2nd (classifier) or 3rd (sgd_accum) optimizer.step() (18 cells), and BatchNorm under "
                   "fp16/bf16 ZeRO fails with 'mixed dtype (CPU)' (12 cells)"),
    ReleaseFinding("0.18.9", False, "16 of 90 CPU ZeRO cells pass and 4 fail as declared; every ZeRO 1/2 "
                   "step fails inside the engine (RuntimeError: Output 0 of Split is a view and is being "
                   "modified inplace: deepspeed/runtime/utils.py all_gather_into_tensor_dp_groups gathers "
                   "into views of torch.split), and ZeRO-3 fails as on 0.19.0"),
    ReleaseFinding("0.17.6", False, "36 of 90 CPU ZeRO cells pass and 12 fail as declared; ZeRO 1/2 of "
                   "regression and scalar fail inside the engine (IndexError: list index out of range), "
                   "the rest as on 0.19.0, and the DeepSpeed-alone reproductions hang"),
    ReleaseFinding("0.16.9", False, "48 of 90 CPU ZeRO cells pass and 12 fail as declared; the other 30 as "
                   "on 0.19.0: no managed_gradient_accumulation (classifier and sgd_accum would train "
                   "silently wrong) and BatchNorm under fp16/bf16 ZeRO fails"),
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


def _finding_for(release: tuple[int, ...]) -> ReleaseFinding | None:
    """The measurement of this exact release, else of the newest patch of an older series (which
    stands for its series); an unmeasured patch of the supported series has none."""
    unsupported = [f for f in FINDINGS if not f.supported]
    exact = next((f for f in unsupported if parse_release(f.release) == release), None)
    if exact is not None or release[:2] == NEWEST_TESTED_SERIES:
        return exact
    return next((f for f in unsupported if parse_release(f.release)[:2] == release[:2]), None)


def check_deepspeed_release(version: str, allow_override: bool = True) -> None:
    """Refuse a release below the supported range; warn once about one newer than any tested.
    allow_override=False: ALLOW_UNSUPPORTED_ENV is not honoured (asking whether it IS supported)."""
    release = parse_release(version)
    if release < MINIMUM:
        known = _finding_for(release)
        why = (f"it is outside the supported range: {known.finding} (deepspeed {known.release})" if known
               else "the core is known to give wrong answers or fail inside the engine on releases "
                    "before 0.19.4, and this one was not measured (none before 0.19.4 has "
                    "managed_gradient_accumulation, which the core's accumulation relies on)")
        message = explain(
            f"deepspeed {version} is installed", why, f"deepspeed{SUPPORTED_RANGE}",
            f'pip install "deepspeed{SUPPORTED_RANGE}"  (or: pip install -e ".[deepspeed]")')
        if allow_override and os.environ.get(ALLOW_UNSUPPORTED_ENV) == "1":
            warnings.warn(f"{ALLOW_UNSUPPORTED_ENV}=1: running anyway, results are not to be trusted. "
                          + message, UserWarning, stacklevel=3)
            return
        raise UnsupportedDeepSpeedError(message)
    if release[:2] > NEWEST_TESTED_SERIES:
        warnings.warn(
            f"deepspeed {version} is newer than any release the core was tested with "
            f"({SUPPORTED_RANGE}); run the matrix (python -m harness run -m deepspeed) before trusting it",
            UserWarning, stacklevel=3)
