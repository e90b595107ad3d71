"""The launch config file: a flat YAML mapping (PyYAML's safe API), versioned and strict."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from accelerate_core.errors import ConfigFileError, ConflictingSettingsError
from accelerate_core.launch import config_file
from accelerate_core.launch.config import (
    CONFIG_VERSION,
    FIELD_NAMES,
    LaunchConfig,
    default_config_path,
    from_mapping,
    load_config,
    parse_text,
    save_config,
)
from accelerate_core.launch.settings import LaunchSettings


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("config", [
    LaunchConfig(backend="deepspeed", cpu=True, num_processes=4, num_machines=2, machine_rank=1,
                 main_process_ip="10.0.0.7", main_process_port=29501, mixed_precision="bf16",
                 zero_stage=3, offload_optimizer_device="cpu", offload_param_device="cpu",
                 gradient_accumulation_steps=4, gradient_clipping=1e-5, cpu_fp16_emulation=False),
    # "no" and "none" are words YAML 1.1 could misread (as false / a string "none"); null is unset.
    LaunchConfig(backend="single", mixed_precision="no", gradient_clipping=1.0),
    LaunchConfig(),
], ids=["deepspeed", "yaml-words", "defaults"])
def test_save_then_load_gives_back_the_same_config(tmp_path: Path, config: LaunchConfig) -> None:
    path = tmp_path / "sub" / "c.yaml"
    save_config(config, path)
    assert load_config(path) == config
    text = path.read_text()
    # Readable and in LaunchConfig's order: header comments, then one `name: value` per line.
    assert text.startswith("# accelerate-core launch config")
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert [line.split(":")[0] for line in body] == ["version", *FIELD_NAMES]
    # Every value comes back with its type (1e-05 a float, "no" a string, null None).
    assert config_file.load(path) == config.to_mapping()
    assert yaml.safe_load(text)["version"] == CONFIG_VERSION


@pytest.mark.parametrize(("text", "where", "why"), [
    ("- version: 1\n- backend: ddp\n", "its top level", "it is a list, not a mapping"),
    ("just words\n", "its top level", "it is a str, not a mapping"),
    ("version: 1\nbackend:\n  name: ddp\n", "entry 'backend'", "flat mapping of names to scalars"),
    ("version: 1\nnum_processes: [1, 2]\n", "entry 'num_processes'", "flat mapping of names to scalars"),
    ("version: 1\n? [a, b]\n: 1\n", "its YAML", "does not parse"),
    ("version: 1\nbackend: 'open\n", "its YAML", "does not parse"),
    ("version: 1\nbackend: ddp\nbackend: single\n", "line 3 ('backend')", "the key 'backend' appears twice"),
])
def test_what_is_not_a_flat_mapping_is_refused_naming_the_file(
        tmp_path: Path, text: str, where: str, why: str) -> None:
    path = write(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigFileError) as info:
        load_config(path)
    message = str(info.value)
    assert f"config file {path}, {where}" in message and why in message and "Fix:" in message


def test_an_unreadable_or_empty_file_is_explained(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match="cannot be read"):
        config_file.load(tmp_path / "missing.yaml")
    assert config_file.load(write(tmp_path / "empty.yaml", "# only a comment\n")) == {}


def test_unknown_key_is_named_with_a_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "version: 1\nbackend: ddp\nnum_process: 2\nfrobnicate: 1\n")
    with pytest.raises(ConfigFileError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message and "'frobnicate'" in message
    assert "'num_process' (did you mean 'num_processes'?)" in message
    assert "Fix:" in message


@pytest.mark.parametrize(("text", "expected"), [
    ("backend: ddp\n", "no 'version' key"),
    ("distributed_type: MULTI_GPU\nuse_cpu: true\n", "Hugging Face accelerate config"),
    ("version: 2\n", "newer accelerate-core"),
    ("version: 0\n", "whole numbers from 1"),
    ('version: "1"\n', "whole numbers from 1"),
])
def test_versions_other_than_the_current_are_explained_not_misread(
        tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigFileError, match=expected):
        load_config(write(tmp_path / "c.yaml", text))


@pytest.mark.parametrize(("text", "expected"), [
    ("version: 1\nmixed_precision: no\n", 'quote it, e.g. mixed_precision: "no"'),
    ("version: 1\nbackend: tpu\n", "not one of the choices"),
    ("version: 1\nbackend: deepspeed\nzero_stage: 4\n", "zero_stage=4"),
    ("version: 1\nnum_processes: 0\n", "out of range"),
    ("version: 1\nnum_processes: two\n", "it should be int"),
    ("version: 1\nbackend: single\nnum_processes: 2\n", "single-device backend runs one process"),
    ("version: 1\nbackend: ddp\nzero_stage: 2\n", "zero_stage is a DeepSpeed setting"),
    ("version: 1\nbackend: deepspeed\nzero_stage: 2\noffload_param_device: cpu\n", "only under ZeRO-3"),
    ("version: 1\nbackend: ddp\nnum_processes: 3\nnum_machines: 2\nmain_process_ip: h\n", "multiple"),
    ("version: 1\nbackend: ddp\nnum_processes: 2\nnum_machines: 2\n", "main_process_ip"),
])
def test_bad_values_and_contradictions_name_the_key_and_the_fix(
        tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigFileError) as info:
        load_config(path)
    assert expected in str(info.value) and str(path) in str(info.value) and "Fix:" in str(info.value)


def test_save_refuses_a_contradictory_config(tmp_path: Path) -> None:
    with pytest.raises(ConflictingSettingsError):
        save_config(LaunchConfig(backend="single", num_processes=2), tmp_path / "c.yaml")
    assert not (tmp_path / "c.yaml").exists()


def test_launch_settings_carry_only_what_was_said_and_deepspeed_keys_only_for_deepspeed() -> None:
    ddp = LaunchConfig(backend="ddp", num_processes=2, mixed_precision="bf16", cpu=False,
                       gradient_accumulation_steps=1)
    assert ddp.to_launch_settings() == LaunchSettings(
        backend="ddp", mixed_precision="bf16", cpu=False, gradient_accumulation_steps=1)
    only = ddp.to_launch_settings(only={"backend", "mixed_precision"})
    assert only == LaunchSettings(backend="ddp", mixed_precision="bf16")
    ds = LaunchConfig(backend="deepspeed", zero_stage=3, offload_param_device="cpu").to_launch_settings()
    assert (ds.zero_stage, ds.offload_param_device, ds.offload_optimizer_device) == (3, "cpu", None)
    # What the launcher writes, every process reads back unchanged.
    assert LaunchSettings.from_environ(ds.to_environ()) == ds


def test_null_is_unset_and_an_older_files_values_read_as_before() -> None:
    unset = from_mapping(config_file.loads(
        "version: 1\nbackend: ddp\nnum_processes: 2\ncpu: null\nmixed_precision: null\n"
        "gradient_accumulation_steps: ~\nmain_process_port:\n"), "test")
    assert (unset.cpu, unset.mixed_precision, unset.gradient_accumulation_steps) == (None, None, None)
    # Unset values reach no process: the script's Accelerator(...) arguments decide them.
    assert unset.to_launch_settings().to_environ() == {"ACCELERATE_CORE_BACKEND": "ddp"}
    # A file written before null was allowed (same version 1) still means what it meant: "no" is
    # a chosen fp32 and 1 a chosen accumulation, both passed on (and binding on the script).
    old = from_mapping(config_file.loads(
        'version: 1\nbackend: ddp\nnum_processes: 2\ncpu: false\nmixed_precision: "no"\n'
        "gradient_accumulation_steps: 1\n"), "test")
    assert old.to_launch_settings().to_environ() == {
        "ACCELERATE_CORE_BACKEND": "ddp", "ACCELERATE_CORE_CPU": "0",
        "ACCELERATE_CORE_MIXED_PRECISION": "no", "ACCELERATE_CORE_GRADIENT_ACCUMULATION_STEPS": "1"}


def test_text_answers_null_none_and_the_none_choice() -> None:
    assert parse_text("mixed_precision", "null", "x") is None
    assert parse_text("mixed_precision", "", "x") is None
    assert parse_text("mixed_precision", "no", "x") == "no"
    assert parse_text("gradient_clipping", "none", "x") is None
    assert parse_text("offload_optimizer_device", "none", "x") == "none"  # a choice, not unset
    assert parse_text("offload_optimizer_device", "null", "x") is None


def test_fp16_emulation_is_allowed_while_the_script_picks_the_precision() -> None:
    base = {"version": 1, "backend": "deepspeed", "cpu": True, "cpu_fp16_emulation": True}
    assert from_mapping(base, "test").cpu_fp16_emulation is True  # mixed_precision unset
    with pytest.raises(ConfigFileError, match="only applies to fp16 on CPU"):
        from_mapping({**base, "mixed_precision": "bf16"}, "test")


def test_default_path_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCELERATE_CORE_CONFIG_FILE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_config_path() == tmp_path / "accelerate_core" / "default_config.yaml"
    monkeypatch.setenv("ACCELERATE_CORE_CONFIG_FILE", str(tmp_path / "elsewhere.yaml"))
    assert default_config_path() == tmp_path / "elsewhere.yaml"
