"""The launch config: what `accelerate-core config` writes and `accelerate-core launch` reads.

A versioned, flat YAML file (read and written by config_file.py). Every key is checked: an
unknown key, a value outside its choices or a pair of settings that contradict each other is a
ConfigFileError that names the file, the key, the valid values and the fix. The launcher turns
a LaunchConfig into a LaunchSettings (settings.py), the only way settings reach `Accelerator()`.

A value may be null: unset. Launch then passes nothing for it, so the script's own
`Accelerator(...)` arguments decide (else the built-in default); a value that is set is binding,
and an `Accelerator(...)` argument contradicting it is an error. `accelerate-core config
--default` leaves unset what only a script should decide (mixed precision, gradient
accumulation, the backend, and the device on a CUDA machine), so `Accelerator(fp16=True)` runs
under it.

Version history: 1 is the first format. Null for backend, cpu, mixed_precision,
gradient_accumulation_steps and the DeepSpeed offload/emulation keys came later within version
1: it only widens what is accepted, and every value an older file holds reads as before ("no" is
still fp32), so the version did not change (an older accelerate-core refuses such a null with a
clear message rather than misreading it). `sync_batchnorm` (null: the script decides, else
off) was added the same way; every file this version writes holds it, and an older
accelerate-core refuses such a file as having an unknown key, listing the keys it knows.
`backend: fsdp` (FSDP2) came later within version 1 too: an older accelerate-core refuses it as
a value outside the choices, naming the ones it knows.
A file without `version`, or with a version this code does not know, is explained and
refused, never read as if it were the current format.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from accelerate_core.choices import BACKENDS, MIXED_PRECISIONS, OFFLOAD_DEVICES, ZERO_STAGES
from accelerate_core.errors import ConfigFileError, ConflictingSettingsError, InvalidSettingError, explain
from accelerate_core.launch import config_file
from accelerate_core.launch.settings import LaunchSettings, config_file_from_environ

CONFIG_VERSION = 1
# Keys of a Hugging Face accelerate config: a file with these is not ours, say so.
_FOREIGN_KEYS = {"distributed_type", "compute_environment", "deepspeed_config", "use_cpu"}


@dataclass(frozen=True)
class LaunchConfig:
    """Version 1 of the launch config. num_processes counts every process on every machine.

    None (null in the file) is unset: launch passes nothing, and the script decides.
    """

    # One of BACKENDS; None: single for one process, ddp for several, deepspeed (fsdp) when the
    # script passes a DeepSpeedPlugin (an FSDPPlugin); the connector decides from the world size.
    backend: str | None = None
    cpu: bool | None = None  # True: CPU even when CUDA devices are present; None: script decides
    num_processes: int = 1
    num_machines: int = 1
    machine_rank: int = 0
    main_process_ip: str | None = None  # needed when num_machines > 1
    main_process_port: int | None = None  # None: a free port (one machine) or 29500
    mixed_precision: str | None = None  # one of MIXED_PRECISIONS ("no": fp32); None: script decides
    zero_stage: int | None = None  # DeepSpeed only; None: the DeepSpeedPlugin default
    # DeepSpeed only; None: the DeepSpeedPlugin's value (the script's, else "none").
    offload_optimizer_device: str | None = None
    offload_param_device: str | None = None  # ZeRO-3 only
    gradient_accumulation_steps: int | None = None  # None: script decides (else 1)
    gradient_clipping: float | None = None
    # DeepSpeed fp16 on a CPU without native fp16 (labelled); None: the DeepSpeedPlugin's value.
    cpu_fp16_emulation: bool | None = None
    # BatchNorm statistics synchronised over the processes; None: the script's
    # Accelerator(sync_batchnorm=...) decides (else off).
    sync_batchnorm: bool | None = None

    @property
    def processes_per_machine(self) -> int:
        return self.num_processes // self.num_machines

    def to_mapping(self) -> dict[str, config_file.Scalar]:
        return {"version": CONFIG_VERSION, **asdict(self)}

    def to_launch_settings(self, only: set[str] | None = None) -> LaunchSettings:
        """The settings each process sees. `only`: pass just these keys (what the user said)."""
        ds = self.backend == "deepspeed"
        values: dict[str, Any] = {
            "backend": self.backend,
            "mixed_precision": self.mixed_precision,
            "cpu": self.cpu,
            "zero_stage": self.zero_stage if ds else None,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "gradient_clipping": self.gradient_clipping,
            "offload_optimizer_device": self.offload_optimizer_device if ds else None,
            "offload_param_device": self.offload_param_device if ds else None,
            "cpu_fp16_emulation": self.cpu_fp16_emulation if ds else None,
            "sync_batchnorm": self.sync_batchnorm,
        }
        if only is not None:
            values = {k: (v if k in only else None) for k, v in values.items()}
        return LaunchSettings(**values)


# name -> (type, choices or None, what is valid in words)
_RULES: dict[str, tuple[type, tuple[Any, ...] | None, str]] = {
    "backend": (str, BACKENDS, ""),
    "cpu": (bool, None, "true or false"),
    "num_processes": (int, None, "a whole number >= 1"),
    "num_machines": (int, None, "a whole number >= 1"),
    "machine_rank": (int, None, "a whole number >= 0"),
    "main_process_ip": (str, None, "a host name or IP address"),
    "main_process_port": (int, None, "a port number, 1-65535"),
    "mixed_precision": (str, MIXED_PRECISIONS, ""),
    "zero_stage": (int, ZERO_STAGES, ""),
    "offload_optimizer_device": (str, OFFLOAD_DEVICES, ""),
    "offload_param_device": (str, OFFLOAD_DEVICES, ""),
    "gradient_accumulation_steps": (int, None, "a whole number >= 1"),
    "gradient_clipping": (float, None, "a number > 0"),
    "cpu_fp16_emulation": (bool, None, "true or false"),
    "sync_batchnorm": (bool, None, "true or false"),
}
# Keys that may be null. For the settings a script can pass to Accelerator(...), null means
# "unset: the script decides"; for the others, see the comments on LaunchConfig.
_NULLABLE = {"main_process_ip", "main_process_port", "zero_stage", "gradient_clipping",
             "mixed_precision", "gradient_accumulation_steps", "cpu", "backend",
             "offload_optimizer_device", "offload_param_device", "cpu_fp16_emulation",
             "sync_batchnorm"}
_MINIMUM = {"num_processes": 1, "num_machines": 1, "machine_rank": 0, "main_process_port": 1,
            "gradient_accumulation_steps": 1}
FIELD_NAMES = tuple(f.name for f in fields(LaunchConfig))


def check_value(name: str, value: Any, given: str) -> Any:
    """Validate one setting and return it normalized. `given` names it in the message."""
    kind, choices, words = _RULES[name]
    valid = choices if choices is not None else words
    fix = "use one of the valid values"
    if value is None:
        if name in _NULLABLE:
            return None
        raise InvalidSettingError(explain(f"{given}=null", "this setting needs a value", valid, fix))
    if kind is str and isinstance(value, bool):
        # YAML 1.1 reads an unquoted no/off/yes/on as a boolean.
        raise InvalidSettingError(explain(
            f"{given}={value}", "an unquoted no/yes/off/on reads as a boolean in YAML", valid,
            f'quote it, e.g. {name}: "no"'))
    if kind is float and isinstance(value, (int, str)) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):  # not a number: the type check below explains
            value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidSettingError(explain(f"{given}={value!r}", f"it should be {kind.__name__}", valid, fix))
    if isinstance(value, str) and choices is not None:
        value = value.lower()
    if choices is not None and value not in choices:
        raise InvalidSettingError(explain(f"{given}={value!r}", "it is not one of the choices", valid, fix))
    if (name in _MINIMUM and value < _MINIMUM[name]) or (name == "main_process_port" and value > 65535):
        raise InvalidSettingError(explain(f"{given}={value!r}", "it is out of range", valid, fix))
    if name == "gradient_clipping" and not value > 0:
        raise InvalidSettingError(explain(f"{given}={value!r}", "it is out of range", valid, fix))
    return value


def parse_text(name: str, text: str, given: str) -> Any:
    """Turn a command-line or questionnaire answer into a checked value of setting `name`."""
    kind = _RULES[name][0]
    value: Any = text.strip()
    if name == "mixed_precision" and value.lower() == "none":
        # "none" would read as unset here, while "no" means fp32: refuse the guess.
        raise InvalidSettingError(explain(
            f"{given}={value!r}", "'none' is ambiguous: 'no' means fp32, while unset leaves it to the "
            "script", (*MIXED_PRECISIONS, "null"),
            "write 'no' for fp32, or 'null' (or nothing) to let the script decide"))
    choices = _RULES[name][1] or ()
    # "none" is unset, except where it is itself a choice (offload devices: no offload).
    if (value.lower() in ("null", "") or (value.lower() == "none" and "none" not in choices)) \
            and name in _NULLABLE:
        value = None
    elif kind is int:
        with contextlib.suppress(ValueError):  # not a whole number: check_value explains
            value = int(value)
    elif kind is bool:
        lowered = value.lower()
        value = True if lowered in ("1", "true", "yes", "y", "on") else (
            False if lowered in ("0", "false", "no", "n", "off") else value)
    return check_value(name, value, given)


def from_mapping(data: Mapping[str, Any], source: str) -> LaunchConfig:
    """Check a mapping read from `source` (a file name, or 'flags') and build the config."""
    _check_version(data, source)
    unknown = sorted(set(data) - set(FIELD_NAMES) - {"version"})
    if unknown:
        hints = [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, FIELD_NAMES, 1))
                 else repr(k) for k in unknown]
        raise ConfigFileError(explain(
            f"{source}: unknown key(s) {', '.join(hints)}", "version 1 of the config has no such setting",
            FIELD_NAMES, "remove or rename them, or write a fresh file with `accelerate-core config`"))
    try:
        values = {k: check_value(k, v, f"{source}: {k}") for k, v in data.items() if k != "version"}
        config = LaunchConfig(**values)
        check_consistent(config, source)
    except (InvalidSettingError, ConflictingSettingsError) as exc:
        raise ConfigFileError(str(exc)) from None
    return config


def _check_version(data: Mapping[str, Any], source: str) -> None:
    version = data.get("version")
    if version is None:
        foreign = sorted(_FOREIGN_KEYS & set(data))
        why = ("it has no 'version' key" + (f" and has {', '.join(foreign)}: it looks like a Hugging Face "
               "accelerate config, which this launcher does not read" if foreign else
               ", so it was not written by `accelerate-core config`"))
        raise ConfigFileError(explain(f"{source}", why, f"version: {CONFIG_VERSION}",
                                      "write a config with `accelerate-core config`"))
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ConfigFileError(explain(
            f"{source}: version={version!r}", "versions are whole numbers from 1",
            f"version: {CONFIG_VERSION}", "write a config with `accelerate-core config`"))
    if version > CONFIG_VERSION:
        raise ConfigFileError(explain(
            f"{source}: version={version}", f"it was written by a newer accelerate-core; this one reads "
            f"versions up to {CONFIG_VERSION} and would misread it", f"version: {CONFIG_VERSION}",
            "upgrade accelerate-core, or write a new config with `accelerate-core config`"))


def check_consistent(config: LaunchConfig, source: str) -> None:
    """Rules between settings (each value alone is already valid)."""
    def conflict(given: str, why: str, fix: str) -> ConflictingSettingsError:
        return ConflictingSettingsError(
            explain(f"{source}: {given}", why, "see `accelerate-core launch --help`", fix))

    c = config
    if c.backend == "single" and c.num_processes > 1:
        raise conflict(f"backend='single' with num_processes={c.num_processes}",
                       "the single-device backend runs one process",
                       "use backend 'ddp', 'deepspeed' or 'fsdp'")
    if c.backend == "fsdp" and c.num_processes < 2:
        raise conflict(f"backend='fsdp' with num_processes={c.num_processes}",
                       "FSDP shards parameters over the processes, and one process has nothing to shard over",
                       "set num_processes 2 or more (e.g. `--num-processes 2`), or use backend 'single'")
    if c.num_processes % c.num_machines:
        raise conflict(f"num_processes={c.num_processes} over num_machines={c.num_machines}",
                       "every machine runs the same number of processes", "make num_processes a multiple")
    if c.machine_rank >= c.num_machines:
        raise conflict(f"machine_rank={c.machine_rank} with num_machines={c.num_machines}",
                       "machine ranks count from 0 to num_machines - 1", "fix machine_rank")
    if c.num_machines > 1 and not c.main_process_ip:
        raise conflict(f"num_machines={c.num_machines} without main_process_ip",
                       "every machine must know the address of machine 0", "set main_process_ip")
    if c.backend != "deepspeed":
        for key, default in (("zero_stage", None), ("offload_optimizer_device", "none"),
                             ("offload_param_device", "none"), ("cpu_fp16_emulation", False)):
            if getattr(c, key) not in (None, default):  # unset, or the off value older files hold
                raise conflict(f"{key}={getattr(c, key)!r} with backend={c.backend!r}",
                               f"{key} is a DeepSpeed setting", "set backend 'deepspeed', or drop it")
    if c.offload_param_device not in (None, "none") and c.zero_stage != 3:
        raise conflict(f"offload_param_device={c.offload_param_device!r} with zero_stage={c.zero_stage}",
                       "parameters are partitioned, hence offloadable, only under ZeRO-3", "set zero_stage 3")
    # Unset precision or device: the script may still pick fp16 on CPU, where the opt-in applies.
    if c.cpu_fp16_emulation and (c.cpu is False or c.mixed_precision not in (None, "fp16")):
        raise conflict("cpu_fp16_emulation=true", "it only applies to fp16 on CPU",
                       "set cpu true and mixed_precision 'fp16' (or leave them unset), or drop it")


def default_config_path() -> Path:
    """$ACCELERATE_CORE_CONFIG_FILE, else ($XDG_CACHE_HOME or ~/.cache)/accelerate_core/
    default_config.yaml."""
    override = config_file_from_environ()
    if override:
        return Path(override).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "accelerate_core" / "default_config.yaml"


def read_mapping(path: Path) -> dict[str, Any]:
    """The raw mapping of a config file, version and keys checked (values checked by from_mapping)."""
    data = config_file.load(path)
    from_mapping(data, f"config file {path}")  # validate the file as a whole
    return data


def load_config(path: Path) -> LaunchConfig:
    return from_mapping(config_file.load(path), f"config file {path}")


def save_config(config: LaunchConfig, path: Path) -> None:
    check_consistent(config, "config to save")
    header = ("accelerate-core launch config, written by `accelerate-core config`.\n"
              "Read by `accelerate-core launch`; flags given to launch override these values.\n"
              "null means unset: launch passes nothing, so the script's Accelerator(...) arguments\n"
              "decide (mixed_precision: fp32 unless the script asks, e.g. Accelerator(fp16=True);\n"
              "gradient_accumulation_steps: 1; cpu: CUDA when present; backend: single for one\n"
              "process, ddp for several, deepspeed if the script passes a DeepSpeedPlugin, fsdp\n"
              "if it passes an FSDPPlugin).\n"
              "A value that is set is binding: an Accelerator(...) argument that contradicts it\n"
              "stops the run with an error.")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = config_file.dump(config.to_mapping(), header=header)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # never leave a half-written config behind
