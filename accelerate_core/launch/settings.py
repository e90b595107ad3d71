"""The one place where settings passed by `accelerate-core launch` are read back.

The launcher turns its config file and flags into environment variables (`to_environ`); every
process it starts builds `Accelerator()`, whose connector reads them with `from_environ`. No other
module reads these variables. A field left as None means "the launcher said nothing about it".

Beside each value the launcher records where it came from (a config file, a launch flag) in
ACCELERATE_CORE_SOURCES, a JSON map, so that a conflict names the place to fix. A value set in
the environment by other means (by hand, by another tool) has no record and is named as the
environment variable it is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from accelerate_core.choices import BACKENDS, MIXED_PRECISIONS, OFFLOAD_DEVICES, ZERO_STAGES
from accelerate_core.errors import InvalidSettingError, explain

PREFIX = "ACCELERATE_CORE_"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


SourceKind = Literal["config file", "flag", "environment"]


@dataclass(frozen=True)
class SettingSource:
    """Where one launch setting came from.

    kind "config file": `where` is the file's path; "flag": `where` is the flag as given
    (`--mixed-precision bf16`, `--no-cpu`) and `flag` its name (`--mixed-precision`, `--cpu`);
    "environment": `where` is the variable, set without the launcher recording a source.
    """

    kind: SourceKind
    where: str
    flag: str = ""


@dataclass(frozen=True)
class LaunchSettings:
    """What the launcher decided, as seen by one process."""

    backend: str | None = None  # one of BACKENDS
    mixed_precision: str | None = None  # one of MIXED_PRECISIONS
    cpu: bool | None = None
    zero_stage: int | None = None
    gradient_accumulation_steps: int | None = None
    gradient_clipping: float | None = None
    offload_optimizer_device: str | None = None  # one of OFFLOAD_DEVICES
    offload_param_device: str | None = None
    # Opt-in to DeepSpeed fp16 on a CPU without native fp16 (an emulation, labelled as such).
    cpu_fp16_emulation: bool | None = None
    # Synchronised BatchNorm statistics over the processes (Accelerator(sync_batchnorm=...)).
    sync_batchnorm: bool | None = None
    # Where the launcher took each set value from (not a setting: left out of ==).
    sources: Mapping[str, SettingSource] = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def variable(field_name: str) -> str:
        return PREFIX + field_name.upper()

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The settings (every field but `sources`)."""
        return tuple(f.name for f in fields(cls) if f.name != "sources")

    @classmethod
    def variables(cls) -> tuple[str, ...]:
        """Every variable the launcher writes for its processes, ACCELERATE_CORE_SOURCES included."""
        return (*(cls.variable(name) for name in cls.names()), SOURCES_VARIABLE)

    def to_environ(self) -> dict[str, str]:
        """The variables to add to each process's environment (unset fields are left out; the
        sources of the set ones, when known, as ACCELERATE_CORE_SOURCES)."""
        out: dict[str, str] = {}
        recorded: dict[str, dict[str, str]] = {}
        for name in self.names():
            value = getattr(self, name)
            if value is None:
                continue
            text = ("1" if value else "0") if isinstance(value, bool) else str(value)
            out[self.variable(name)] = text
            source = self.sources.get(name)
            if source is not None and source.kind != "environment":
                # The value goes with it: a record no longer matching its variable is ignored.
                recorded[name] = {"kind": source.kind, "where": source.where, "flag": source.flag,
                                  "value": text}
        if recorded:
            out[SOURCES_VARIABLE] = json.dumps(recorded, sort_keys=True)
        return out

    def source_of(self, name: str) -> SettingSource:
        """Where the value of setting `name` came from; without a record, its variable."""
        return self.sources.get(name) or SettingSource("environment", self.variable(name))

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> LaunchSettings:
        env = os.environ if environ is None else environ
        raw = {name: env.get(cls.variable(name)) for name in cls.names()}
        return cls(
            backend=_choice(raw, "backend", BACKENDS),
            mixed_precision=_choice(raw, "mixed_precision", MIXED_PRECISIONS),
            cpu=_flag(raw, "cpu"),
            zero_stage=_integer(raw, "zero_stage", ZERO_STAGES),
            gradient_accumulation_steps=_integer(raw, "gradient_accumulation_steps", None),
            gradient_clipping=_number(raw, "gradient_clipping"),
            offload_optimizer_device=_choice(raw, "offload_optimizer_device", OFFLOAD_DEVICES),
            offload_param_device=_choice(raw, "offload_param_device", OFFLOAD_DEVICES),
            cpu_fp16_emulation=_flag(raw, "cpu_fp16_emulation"),
            sync_batchnorm=_flag(raw, "sync_batchnorm"),
            sources=_sources(env.get(SOURCES_VARIABLE), raw),
        )


SOURCES_VARIABLE = PREFIX + "SOURCES"
_KINDS: tuple[SourceKind, ...] = ("config file", "flag")


def _sources(text: str | None, raw: Mapping[str, str | None]) -> dict[str, SettingSource]:
    """The launcher's records of where values came from. Only a message depends on them, so a
    record that does not parse or no longer matches its variable is left out (the value is then
    named as the environment variable it is), never an error."""
    if not text:
        return {}
    try:
        data: Any = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    found: dict[str, SettingSource] = {}
    for name, entry in data.items():
        if not isinstance(entry, dict) or name not in raw or raw[name] in (None, ""):
            continue
        kind, where, flag = entry.get("kind"), entry.get("where"), entry.get("flag", "")
        if kind not in _KINDS or not isinstance(where, str) or not isinstance(flag, str) \
                or entry.get("value") != raw[name]:
            continue
        found[name] = SettingSource(kind, where, flag)
    return found


def _bad(name: str, value: str, valid: object) -> InvalidSettingError:
    return InvalidSettingError(
        explain(
            f"environment variable {LaunchSettings.variable(name)}={value!r}",
            "it is not a value the launcher writes",
            str(valid),
            "unset it, or start the script with `accelerate-core launch`, which sets it",
        )
    )


def _choice(raw: dict[str, str | None], name: str, valid: tuple[str, ...]) -> str | None:
    value = raw[name]
    if value is None or value == "":
        return None
    if value.lower() not in valid:
        raise _bad(name, value, valid)
    return value.lower()


def _flag(raw: dict[str, str | None], name: str) -> bool | None:
    value = raw[name]
    if value is None or value == "":
        return None
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise _bad(name, value, _TRUE + _FALSE)


def _integer(raw: dict[str, str | None], name: str, valid: tuple[int, ...] | None) -> int | None:
    value = raw[name]
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise _bad(name, value, valid or "a whole number >= 1") from None
    if (valid is not None and number not in valid) or (valid is None and number < 1):
        raise _bad(name, value, valid or "a whole number >= 1")
    return number


def _number(raw: dict[str, str | None], name: str) -> float | None:
    value = raw[name]
    if value is None or value == "":
        return None
    try:
        return float(value)
    except ValueError:
        raise _bad(name, value, "a number") from None


# Read by the CLI (not by the processes it starts): where `accelerate-core config` writes and
# `accelerate-core launch` reads the config file when `--config-file` is not given.
CONFIG_FILE_VARIABLE = PREFIX + "CONFIG_FILE"


def config_file_from_environ(environ: Mapping[str, str] | None = None) -> str | None:
    """The config file path named by ACCELERATE_CORE_CONFIG_FILE, or None when unset/empty."""
    env = os.environ if environ is None else environ
    return env.get(CONFIG_FILE_VARIABLE) or None
