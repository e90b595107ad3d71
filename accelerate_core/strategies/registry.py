"""Strategy names -> classes, imported only when asked for.

The DeepSpeed strategy lives in a module that imports deepspeed, so it is referenced here as a
"module:Class" string and `require_deepspeed()` runs before that module is imported: asking for
"zero2" without deepspeed installed gives the install command, never a bare ImportError, and
asking for "ddp" never imports deepspeed at all.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from accelerate_core.errors import InvalidSettingError, explain
from accelerate_core.imports import require_deepspeed
from accelerate_core.strategies.base import Strategy


@dataclass(frozen=True)
class StrategySpec:
    name: str
    target: str  # "package.module:ClassName"
    #: values the name fixes (applied to the DeepSpeedPlugin by the connector)
    presets: dict[str, Any] = field(default_factory=dict)
    needs_deepspeed: bool = False


_DEEPSPEED_TARGET = "accelerate_core.strategies.deepspeed.strategy:DeepSpeedStrategy"

STRATEGIES: dict[str, StrategySpec] = {
    "single": StrategySpec("single", "accelerate_core.strategies.single_device:SingleDeviceStrategy"),
    "ddp": StrategySpec("ddp", "accelerate_core.strategies.ddp:DDPStrategy"),
    # Part of torch (FSDP2): no extra dependency, imported only when asked for like the others.
    "fsdp": StrategySpec("fsdp", "accelerate_core.strategies.fsdp.strategy:FSDPStrategy"),
    **{
        f"zero{stage}": StrategySpec(f"zero{stage}", _DEEPSPEED_TARGET, {"zero_stage": stage}, True)
        for stage in (0, 1, 2, 3)
    },
}


def get_spec(name: str) -> StrategySpec:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise InvalidSettingError(
            explain(
                f"strategy {name!r}",
                "no strategy is registered under that name",
                sorted(STRATEGIES),
                "use one of the registered names",
            )
        ) from None


def load_strategy_class(name: str) -> type[Strategy]:
    """Import and return the class registered as `name` (deepspeed checked first if needed)."""
    spec = get_spec(name)
    if spec.needs_deepspeed:
        require_deepspeed(f"strategy {name!r} (DeepSpeed ZeRO stage {spec.presets['zero_stage']})")
    module_name, _, class_name = spec.target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(cls, type) and issubclass(cls, Strategy)):
        raise TypeError(f"{spec.target} is not a Strategy subclass")
    return cls
