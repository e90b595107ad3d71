"""The launch config file: versioned, strict, and read the same with or without PyYAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelerate_core import flat_yaml
from accelerate_core.config import (
    CONFIG_VERSION,
    LaunchConfig,
    default_config_path,
    from_mapping,
    load_config,
    parse_text,
    save_config,
)
from accelerate_core.errors import ConfigFileError, ConflictingSettingsError
from accelerate_core.launch_env import LaunchSettings

try:
    import yaml
except ImportError:  # the small reader alone is still tested
    yaml = None  # type: ignore[assignment]

READERS = [False, pytest.param(True, marks=pytest.mark.skipif(yaml is None, reason="PyYAML not installed"))]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("use_pyyaml", READERS)
def test_save_then_load_gives_back_the_same_config(tmp_path: Path, use_pyyaml: bool) -> None:
    config = LaunchConfig(backend="deepspeed", cpu=True, num_processes=4, num_machines=2, machine_rank=1,
                          main_process_ip="10.0.0.7", main_process_port=29501, mixed_precision="bf16",
                          zero_stage=3, offload_optimizer_device="cpu", offload_param_device="cpu",
                          gradient_accumulation_steps=4, gradient_clipping=1e-5)
    path = tmp_path / "sub" / "c.yaml"
    save_config(config, path)
    data = flat_yaml.loads(path.read_text(), use_pyyaml=use_pyyaml)
    assert data["version"] == CONFIG_VERSION
    assert from_mapping(data, "test") == config


def test_small_reader_agrees_with_pyyaml_on_what_it_accepts() -> None:
    if yaml is None:
        pytest.skip("PyYAML not installed: nothing to compare with")
    text = ("# comment\nversion: 1\nbackend: ddp   # trailing comment\nmixed_precision: 'no'\n"
            'main_process_ip: "10.0.0.1"\nhost: 10.0.0.1\nflag: no\nother: On\nempty:\ntilde: ~\n'
            "count: 12\nneg: -3\nratio: 0.25\nbig: 1.0e+16\nword: 1.0e5\nquote: 'it''s'\n"
            'esc: "a\\tb"\n')
    small = flat_yaml.loads(text, use_pyyaml=False)
    assert small == yaml.safe_load(text)
    assert small["flag"] is False and small["word"] == "1.0e5" and small["host"] == "10.0.0.1"


@pytest.mark.parametrize("line", ["x: 010", "x: 1_000", "x: 0x1f", "x: [1, 2]", "x: {a: 1}", "x: &a 1",
                                  "x: 2024-01-31", "x: .inf", "  x: 1", "x 1", "x: 'open", "x: - 1"])
def test_small_reader_refuses_what_it_would_guess(line: str) -> None:
    with pytest.raises(ConfigFileError, match="config file"):
        flat_yaml.loads(line + "\n", use_pyyaml=False)


@pytest.mark.parametrize("use_pyyaml", READERS)
def test_duplicate_keys_are_an_error(use_pyyaml: bool) -> None:
    with pytest.raises(ConfigFileError, match="backend"):
        flat_yaml.loads("backend: ddp\nbackend: single\n", use_pyyaml=use_pyyaml)


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


@pytest.mark.parametrize("use_pyyaml", READERS)
def test_null_is_unset_and_an_older_files_values_read_as_before(use_pyyaml: bool) -> None:
    unset = from_mapping(flat_yaml.loads(
        "version: 1\nbackend: ddp\nnum_processes: 2\ncpu: null\nmixed_precision: null\n"
        "gradient_accumulation_steps: ~\n", use_pyyaml=use_pyyaml), "test")
    assert (unset.cpu, unset.mixed_precision, unset.gradient_accumulation_steps) == (None, None, None)
    # Unset values reach no process: the script's Accelerator(...) arguments decide them.
    assert unset.to_launch_settings().to_environ() == {"ACCELERATE_CORE_BACKEND": "ddp"}
    # A file written before null was allowed (same version 1) still means what it meant: "no" is
    # a chosen fp32 and 1 a chosen accumulation, both passed on (and binding on the script).
    old = from_mapping(flat_yaml.loads(
        'version: 1\nbackend: ddp\nnum_processes: 2\ncpu: false\nmixed_precision: "no"\n'
        "gradient_accumulation_steps: 1\n", use_pyyaml=use_pyyaml), "test")
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
