"""Flags + launch settings + world size -> one Strategy and one Precision.

Every rule about which settings go together lives here, with its error message. Precedence: an
Accelerator argument the user passed explicitly, else what `accelerate-core launch` exported
(LaunchSettings), else the default. An explicit argument that contradicts the launch settings is
a ConflictingSettingsError: silently preferring either side would run a different experiment
from the one one of them asked for.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any

from accelerate_core.choices import MIXED_PRECISIONS
from accelerate_core.deepspeed_plugin import DeepSpeedPlugin
from accelerate_core.errors import ConflictingSettingsError, InvalidSettingError, explain
from accelerate_core.fsdp_plugin import FSDPPlugin
from accelerate_core.launch.settings import LaunchSettings
from accelerate_core.precision.amp import AMPPrecision
from accelerate_core.precision.base import Precision
from accelerate_core.precision.fp32 import FP32Precision
from accelerate_core.precision.fsdp import FSDPPrecision
from accelerate_core.state import ProcessState
from accelerate_core.strategies.base import Strategy
from accelerate_core.strategies.registry import get_spec, load_strategy_class


@dataclass(frozen=True)
class Resolved:
    """What the connector decided (also what `accelerator.strategy` was built from)."""

    backend: str  # "single" | "ddp" | "deepspeed" | "fsdp"
    strategy_name: str  # registry name: "single", "ddp", "zero1".."zero3", "fsdp"
    mixed_precision: str
    cpu: bool
    gradient_accumulation_steps: int
    deepspeed_plugin: DeepSpeedPlugin | None
    # Synchronised BatchNorm statistics on multi-process runs (a no-op on one process).
    sync_batchnorm: bool = False
    fsdp_plugin: FSDPPlugin | None = None


def _conflict(given: str, setting: str, launch: LaunchSettings, wanted: object, keep: str
              ) -> ConflictingSettingsError:
    """An argument of the script (`given`) against the launch setting `setting`.

    The message names where the launch value came from (the config file, the launch flag, or an
    environment variable set outside the launcher) and the fix there: `wanted` is the value that
    agrees with the script (None: any but the launched one); `keep` says how the script would take
    the launcher's value instead.
    """
    launched = getattr(launch, setting)
    source = launch.source_of(setting)
    told = f"the launcher was told {setting}={launched!r}"
    if source.kind == "config file":
        entry = f"{setting}: {_yaml(launched)}"
        why = f"{told} by the config file {source.where} (`{entry}`)"
        change = f" to `{setting}: {_yaml(wanted)}` or" if wanted is not None else ""
        fix = f"in {source.where}, change `{entry}`{change} to `{setting}: null` (the script decides)"
    elif source.kind == "flag":
        why = f"{told} by the launch flag `{source.where}`"
        fix = f"drop `{source.where}` from the `accelerate-core launch` command"
        if wanted is not None:
            fix += f", or change it to `{_flag(source.flag, wanted)}`"
    else:
        variable = source.where
        why = (f"the environment variable {variable}={_environ(launched)}, set outside "
               f"`accelerate-core launch`, says {setting}={launched!r}")
        fix = f"unset {variable}"
        if wanted is not None:
            fix += f", or set {variable}={_environ(wanted)}"
    return ConflictingSettingsError(
        explain(
            given,
            why,
            f"{launched!r}, or leave the argument out to take the launcher's value",
            f"{fix}; or {keep}",
        )
    )


_YAML_WORDS = ("no", "yes", "n", "y", "on", "off", "true", "false", "null", "~", "")


def _yaml(value: object) -> str:
    """A value as the config file spells it (`mixed_precision: 'no'`: a bare no is false)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.lower() in _YAML_WORDS:
        return f"'{value}'"
    return str(value)


def _environ(value: object) -> str:
    return ("1" if value else "0") if isinstance(value, bool) else str(value)


def _flag(flag: str, value: object) -> str:
    """The launch flag giving `value` (`--no-cpu` for a switch set to False)."""
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {value}"


def resolve_mixed_precision(fp16: bool | None, mixed_precision: str | None, launch: LaunchSettings) -> str:
    if mixed_precision is not None and mixed_precision not in MIXED_PRECISIONS:
        raise InvalidSettingError(
            explain(f"mixed_precision={mixed_precision!r}", "it is not a precision the core runs",
                    MIXED_PRECISIONS, "pass one of the valid values ('no' means fp32)")
        )
    if fp16 is not None and not isinstance(fp16, bool):
        raise InvalidSettingError(
            explain(f"fp16={fp16!r}", "fp16 is a switch", "True, False", "pass fp16=True or leave it out")
        )
    chosen = mixed_precision
    if fp16 is not None:
        if fp16 and mixed_precision not in (None, "fp16"):
            raise ConflictingSettingsError(
                explain(f"fp16=True with mixed_precision={mixed_precision!r}", "the two disagree",
                        "fp16=True alone, or mixed_precision alone",
                        "pass only mixed_precision=... (fp16=True means mixed_precision='fp16')")
            )
        if not fp16 and mixed_precision == "fp16":
            raise ConflictingSettingsError(
                explain("fp16=False with mixed_precision='fp16'", "the two disagree",
                        "one of the two", "drop fp16=False")
            )
        if fp16:
            chosen = "fp16"
    if chosen is not None and launch.mixed_precision is not None and chosen != launch.mixed_precision:
        argument = "fp16=True" if mixed_precision is None else f"mixed_precision={mixed_precision!r}"
        given = f"Accelerator({argument})"
        if mixed_precision is None:
            given += f", i.e. mixed_precision={chosen!r}"
        raise _conflict(given, "mixed_precision", launch, chosen,
                        f"drop {argument} from the script's Accelerator(...)")
    if chosen is None:
        # fp16=False alone says "not fp16", which still leaves the launcher free to pick bf16.
        chosen = launch.mixed_precision or "no"
        if fp16 is False and chosen == "fp16":
            raise _conflict("Accelerator(fp16=False)", "mixed_precision", launch, None,
                            "drop fp16=False from the script's Accelerator(...)")
    return chosen


def resolve_gradient_accumulation(value: int | None, launch: LaunchSettings) -> int:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidSettingError(
            explain(f"gradient_accumulation_steps={value!r}", "it must be a whole number of at least 1",
                    "1, 2, 3, ...", "pass an int >= 1 (1 means no accumulation)")
        )
    if value is not None and launch.gradient_accumulation_steps is not None \
            and value != launch.gradient_accumulation_steps:
        raise _conflict(f"Accelerator(gradient_accumulation_steps={value!r})", "gradient_accumulation_steps",
                        launch, value, "drop gradient_accumulation_steps from the script's Accelerator(...)")
    return value or launch.gradient_accumulation_steps or 1


def resolve_cpu(cpu: bool | None, launch: LaunchSettings) -> bool:
    if cpu is not None and launch.cpu is not None and bool(cpu) != launch.cpu:
        raise _conflict(f"Accelerator(cpu={cpu!r})", "cpu", launch, bool(cpu),
                        "drop cpu from the script's Accelerator(...)")
    return bool(cpu) if cpu is not None else bool(launch.cpu)


def resolve_sync_batchnorm(value: bool | None, launch: LaunchSettings) -> bool:
    if value is not None and not isinstance(value, bool):
        raise InvalidSettingError(
            explain(f"sync_batchnorm={value!r}", "sync_batchnorm is a switch", "True, False",
                    "pass sync_batchnorm=True or leave it out")
        )
    if value is not None and launch.sync_batchnorm is not None and value != launch.sync_batchnorm:
        raise _conflict(f"Accelerator(sync_batchnorm={value!r})", "sync_batchnorm", launch, value,
                        "drop sync_batchnorm from the script's Accelerator(...)")
    return value if value is not None else bool(launch.sync_batchnorm)


def resolve_backend(plugin: DeepSpeedPlugin | None, launch: LaunchSettings, world_size: int,
                    fsdp_plugin: FSDPPlugin | None = None) -> str:
    if plugin is not None and not isinstance(plugin, DeepSpeedPlugin):
        raise InvalidSettingError(
            explain(f"deepspeed_plugin={type(plugin).__name__}", "it is not a DeepSpeedPlugin",
                    "accelerate_core.DeepSpeedPlugin(...)", "build one with DeepSpeedPlugin(zero_stage=...)")
        )
    if fsdp_plugin is not None and not isinstance(fsdp_plugin, FSDPPlugin):
        raise InvalidSettingError(
            explain(f"fsdp_plugin={type(fsdp_plugin).__name__}", "it is not an FSDPPlugin",
                    "accelerate_core.FSDPPlugin(...)", "build one with FSDPPlugin(wrap=...), or leave it out")
        )
    if plugin is not None and fsdp_plugin is not None:
        raise ConflictingSettingsError(
            explain("Accelerator(deepspeed_plugin=..., fsdp_plugin=...)",
                    "DeepSpeed ZeRO and FSDP are two ways of sharding the same model; a run uses one",
                    "deepspeed_plugin alone, or fsdp_plugin alone",
                    "drop one of the two plugins from the script's Accelerator(...)")
        )
    if plugin is not None:
        if launch.backend not in (None, "deepspeed"):
            raise _conflict("Accelerator(deepspeed_plugin=DeepSpeedPlugin(...))", "backend", launch,
                            "deepspeed", "drop deepspeed_plugin from the script's Accelerator(...)")
        return "deepspeed"
    if fsdp_plugin is not None:
        if launch.backend not in (None, "fsdp"):
            raise _conflict("Accelerator(fsdp_plugin=FSDPPlugin(...))", "backend", launch,
                            "fsdp", "drop fsdp_plugin from the script's Accelerator(...)")
        backend = "fsdp"
    else:
        backend = launch.backend or ("ddp" if world_size > 1 else "single")
    if backend == "single" and world_size > 1:
        raise ConflictingSettingsError(
            explain(f"backend 'single' on {world_size} processes", "a single-device run has one process",
                    "'ddp', 'deepspeed' or 'fsdp' for several processes",
                    "launch with --num-processes 1, or choose --backend ddp")
        )
    if backend == "fsdp" and world_size < 2:
        given = "Accelerator(fsdp_plugin=FSDPPlugin(...))" if fsdp_plugin is not None else "backend 'fsdp'"
        raise ConflictingSettingsError(
            explain(f"{given} on 1 process",
                    "FSDP shards parameters over the processes; on one process there is nothing to "
                    "shard over (FSDP there is the single-device run at a higher cost)",
                    "'fsdp' with 2 or more processes, or 'single' for one",
                    "launch with `accelerate-core launch --backend fsdp --num-processes 2` (or more), "
                    "or drop fsdp_plugin / --backend fsdp to run on one process")
        )
    return backend


def check_fsdp_plugin(plugin: FSDPPlugin, process: ProcessState) -> None:
    """Rules between the plugin and the device (each field alone was checked by the plugin)."""
    if plugin.cpu_offload and process.device.type == "cpu":
        raise ConflictingSettingsError(
            explain("FSDPPlugin(cpu_offload=True) on a CPU run (cpu=True, or no CUDA device)",
                    "offloading moves sharded parameters from the accelerator to CPU memory, and "
                    "this run keeps everything in CPU memory already",
                    "cpu_offload=True with CUDA devices, or cpu_offload=False",
                    "drop cpu_offload=True, or run on CUDA (cpu=False)")
        )


def build_deepspeed_plugin(
    plugin: DeepSpeedPlugin | None, launch: LaunchSettings, gas: int
) -> DeepSpeedPlugin:
    """A copy of the user's plugin (or one made from the launch settings) with the launcher's
    DeepSpeed values merged in and gradient accumulation filled in."""
    base = DeepSpeedPlugin() if plugin is None else plugin
    defaults = DeepSpeedPlugin()
    updates: dict[str, Any] = {}
    for name in ("zero_stage", "gradient_clipping", "offload_optimizer_device",
                 "offload_param_device", "cpu_fp16_emulation"):
        launched = getattr(launch, name)
        if launched is None:
            continue
        mine = getattr(base, name)
        # A plugin value left at its default yields to the launcher; a chosen one must agree.
        if plugin is not None and mine != getattr(defaults, name) and mine != launched:
            raise _conflict(f"DeepSpeedPlugin({name}={mine!r})", name, launch, mine,
                            f"leave {name} out of the script's DeepSpeedPlugin(...)")
        updates[name] = launched
    if base.gradient_accumulation_steps is None:
        updates["gradient_accumulation_steps"] = gas
    elif base.gradient_accumulation_steps != gas:
        raise ConflictingSettingsError(
            explain(f"DeepSpeedPlugin(gradient_accumulation_steps={base.gradient_accumulation_steps})",
                    f"the Accelerator uses gradient_accumulation_steps={gas}", f"{gas}, or None",
                    "set it in one place only (the plugin's None takes the Accelerator's value)")
        )
    return dataclasses.replace(base, **updates)


def build_precision(backend: str, mixed_precision: str, process: ProcessState) -> Precision:
    if backend == "fsdp":
        # FSDP casts parameters itself (MixedPrecisionPolicy) and scales fp16 losses with one
        # skip decision for all ranks; no per-op autocast.
        return FSDPPrecision(mixed_precision, process.device)
    if backend == "deepspeed":
        module = importlib.import_module("accelerate_core.precision.deepspeed")
        precision: Precision = module.DeepSpeedPrecision(mixed_precision)
        return precision
    if mixed_precision == "no":
        return FP32Precision()
    return AMPPrecision(mixed_precision, process.device)


def connect(
    *,
    fp16: bool | None,
    mixed_precision: str | None,
    cpu: bool | None,
    gradient_accumulation_steps: int | None,
    deepspeed_plugin: DeepSpeedPlugin | None,
    sync_batchnorm: bool | None = None,
    fsdp_plugin: FSDPPlugin | None = None,
    launch: LaunchSettings | None = None,
    process: ProcessState | None = None,
) -> tuple[Resolved, ProcessState, Strategy]:
    """Resolve every setting and build the strategy (its process group is not set up yet)."""
    launch = LaunchSettings.from_environ() if launch is None else launch
    precision_name = resolve_mixed_precision(fp16, mixed_precision, launch)
    gas = resolve_gradient_accumulation(gradient_accumulation_steps, launch)
    use_cpu = resolve_cpu(cpu, launch)
    sync_bn = resolve_sync_batchnorm(sync_batchnorm, launch)
    process = ProcessState.from_environ(cpu=use_cpu) if process is None else process
    backend = resolve_backend(deepspeed_plugin, launch, process.world_size, fsdp_plugin)
    plugin: DeepSpeedPlugin | None = None
    fsdp: FSDPPlugin | None = None
    if backend == "deepspeed":
        plugin = build_deepspeed_plugin(deepspeed_plugin, launch, gas)
        if plugin.zero_stage not in (0, 1, 2, 3):
            raise InvalidSettingError(
                explain(f"DeepSpeedPlugin(zero_stage={plugin.zero_stage!r})", "ZeRO has stages 0 to 3",
                        "0, 1, 2, 3", "pass zero_stage=1, 2 or 3")
            )
        name = f"zero{plugin.zero_stage}"
        spec = get_spec(name)
        plugin = dataclasses.replace(plugin, **spec.presets)
        strategy_cls = load_strategy_class(name)  # require_deepspeed() before any import
        precision = build_precision(backend, precision_name, process)
        strategy = strategy_cls(process, precision, plugin=plugin,  # type: ignore[call-arg]
                                gradient_accumulation_steps=gas)
    elif backend == "fsdp":
        # `launch --backend fsdp` with a script that passes no plugin: the plugin's defaults.
        fsdp = fsdp_plugin if fsdp_plugin is not None else FSDPPlugin()
        check_fsdp_plugin(fsdp, process)
        name = backend
        strategy_cls = load_strategy_class(name)
        strategy = strategy_cls(process, build_precision(backend, precision_name, process),  # type: ignore[call-arg]
                                plugin=fsdp)
    else:
        name = backend
        strategy_cls = load_strategy_class(name)
        strategy = strategy_cls(process, build_precision(backend, precision_name, process))
    strategy.sync_batchnorm = sync_bn
    resolved = Resolved(backend, name, precision_name, use_cpu, gas, plugin, sync_bn, fsdp)
    return resolved, process, strategy
