"""FSDP's settings, in this process: the plugin's own checks, the connector's rules (each refusal
says what was given, why, the valid choices and the fix), the config file, the questionnaire and
what `accelerate-core launch --backend fsdp` passes to its processes (--dry-run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from accelerate_core import (
    Accelerator,
    ConflictingSettingsError,
    DeepSpeedPlugin,
    FSDPPlugin,
    InvalidSettingError,
)
from accelerate_core.connector import Resolved, connect, resolve_backend
from accelerate_core.errors import ConfigFileError
from accelerate_core.launch.config import LaunchConfig, from_mapping, load_config
from accelerate_core.launch.settings import LaunchSettings, SettingSource
from accelerate_core.precision.fsdp import FSDPPrecision
from accelerate_core.state import ProcessState
from accelerate_core.strategies.fsdp.wrap import choose_units
from accelerate_core.strategies.registry import STRATEGIES, load_strategy_class
from tests.accelerate_core.commands.cli_helpers import cli_environ, describe, run_cli_in_process

# FSDP is part of torch: the same outcome with and without deepspeed, so tests(nodeepspeed) runs it.
pytestmark = [pytest.mark.fsdp, pytest.mark.nodeepspeed]

TWO_RANKS = ProcessState(rank=0, local_rank=0, world_size=2, device=torch.device("cpu"))
ONE_RANK = ProcessState(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
NO_LAUNCH = LaunchSettings()


def _actionable(error: pytest.ExceptionInfo[Exception], *fragments: str) -> str:
    message = str(error.value)
    assert "Valid:" in message and "Fix:" in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def _connect(launch: LaunchSettings = NO_LAUNCH, process: ProcessState = TWO_RANKS,
             **kwargs: Any) -> tuple[Resolved, Any]:
    """The resolved settings and the strategy (Any: the FSDP strategy's own attributes are read)."""
    arguments: dict[str, Any] = {"fp16": None, "mixed_precision": None, "cpu": True,
                                    "gradient_accumulation_steps": None, "deepspeed_plugin": None}
    arguments.update(kwargs)
    resolved, _, strategy = connect(launch=launch, process=process, **arguments)
    return resolved, strategy


# -- the plugin and the registry ---------------------------------------------------------------------
def test_fsdp_is_a_registered_strategy_loaded_on_demand() -> None:
    assert "fsdp" in STRATEGIES and not STRATEGIES["fsdp"].needs_deepspeed
    assert load_strategy_class("fsdp").name == "fsdp"


@pytest.mark.parametrize("wrap", ["Linear", [], [nn.Linear, "x"], nn.Linear, 3])
def test_plugin_refuses_a_wrap_that_is_no_policy(wrap: object) -> None:
    with pytest.raises(InvalidSettingError) as info:
        FSDPPlugin(wrap=wrap)  # type: ignore[arg-type]
    _actionable(info, "FSDPPlugin(wrap=", "a non-empty list of module classes")


@pytest.mark.parametrize("field", ["reshard_after_forward", "cpu_offload"])
def test_plugin_switches_are_booleans(field: str) -> None:
    with pytest.raises(InvalidSettingError) as info:
        FSDPPlugin(**{field: "yes"})  # type: ignore[arg-type]
    _actionable(info, f"FSDPPlugin({field}='yes')")


def test_default_policy_shards_each_child_holding_parameters_then_the_root() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1)))
    assert choose_units(model, FSDPPlugin()) == ["2", "0", ""]
    assert choose_units(model, FSDPPlugin(wrap=[nn.Linear])) == ["2.1", "2.0", "0", ""]
    chosen = FSDPPlugin(wrap=lambda name, module: name.startswith("2."))
    assert choose_units(model, chosen) == ["2.1", "2.0", ""]


class _Tied(nn.Module):
    """An embedding and an output head sharing one weight (as harness/tasks/lm.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 5, bias=False)
        self.head.weight = self.embed.weight


def test_default_policy_leaves_tied_children_to_the_root() -> None:
    # embed and head share a parameter with a module outside them: both fall to the root unit.
    assert choose_units(_Tied(), FSDPPlugin()) == ["body", ""]
    # A unit containing both modules keeps the tie in one unit.
    outer = nn.Sequential(_Tied(), nn.Linear(5, 2))
    assert choose_units(outer, FSDPPlugin()) == ["1", "0", ""]


@pytest.mark.parametrize("wrap", [[nn.Linear], [nn.Embedding], [nn.Linear, nn.Embedding]])
def test_an_explicit_wrap_that_splits_a_tie_is_refused_with_the_names(wrap: list[type]) -> None:
    with pytest.raises(InvalidSettingError) as error:
        choose_units(_Tied(), FSDPPlugin(wrap=wrap))
    _actionable(error, "'embed.weight'", "'head.weight'", "module 'embed'", "module 'head'",
                "exactly one unit")


def test_a_callable_wrap_that_splits_a_tie_is_refused() -> None:
    with pytest.raises(InvalidSettingError) as error:
        choose_units(_Tied(), FSDPPlugin(wrap=lambda name, module: name == "head"))
    _actionable(error, "'head.weight'", "unit 'head'", "the root unit")


def test_batchnorm_becomes_its_own_unit_when_asked() -> None:
    model = nn.Sequential(nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.ReLU()), nn.Linear(3, 1))
    assert choose_units(model, FSDPPlugin()) == ["1", "0", ""]
    assert choose_units(model, FSDPPlugin(), batchnorm_units=True) == ["1", "0.1", "0", ""]
    assert choose_units(model, FSDPPlugin(wrap=[nn.Linear]), batchnorm_units=True) == \
        ["1", "0.1", "0.0", ""]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_batchnorm_units_compute_in_fp32_and_hand_back_the_half_dtype(precision: str) -> None:
    fsdp = FSDPPrecision(precision, torch.device("cpu"))
    half = fsdp.param_dtype
    policy = fsdp.policy(root=False, fp32=True)
    assert (policy.param_dtype, policy.reduce_dtype, policy.output_dtype) == \
        (torch.float32, torch.float32, half)
    assert policy.cast_forward_inputs  # its inputs arrive in the half dtype and are cast to fp32
    plain = fsdp.policy(root=False)
    assert (plain.param_dtype, plain.reduce_dtype, plain.output_dtype) == (half, torch.float32, None)
    assert FSDPPrecision("no", torch.device("cpu")).policy(root=False, fp32=True).param_dtype is None


# -- the connector ------------------------------------------------------------------------------------
def test_plugin_resolves_to_the_fsdp_strategy_and_precision() -> None:
    resolved, strategy = _connect(fsdp_plugin=FSDPPlugin(reshard_after_forward=False), mixed_precision="bf16")
    assert (resolved.backend, resolved.strategy_name, strategy.name) == ("fsdp", "fsdp", "fsdp")
    assert resolved.fsdp_plugin == FSDPPlugin(reshard_after_forward=False)
    assert isinstance(strategy.precision, FSDPPrecision) and strategy.precision.param_dtype == torch.bfloat16
    policy = strategy.precision.policy(root=True)
    assert (policy.param_dtype, policy.reduce_dtype, policy.output_dtype) == \
        (torch.bfloat16, torch.float32, torch.float32)
    assert not strategy.precision.uses_autocast  # FSDP casts the parameters; no per-op autocast


def test_launch_backend_fsdp_without_a_plugin_takes_the_defaults() -> None:
    resolved, strategy = _connect(LaunchSettings(backend="fsdp"))
    assert resolved.strategy_name == "fsdp" and resolved.fsdp_plugin == FSDPPlugin()
    assert strategy.plugin == FSDPPlugin()


def test_fsdp_and_deepspeed_plugins_together_are_refused() -> None:
    with pytest.raises(ConflictingSettingsError) as info:
        resolve_backend(DeepSpeedPlugin(), NO_LAUNCH, 2, FSDPPlugin())
    _actionable(info, "deepspeed_plugin=..., fsdp_plugin=...", "drop one of the two plugins")


def test_fsdp_plugin_against_another_launched_backend_names_the_source() -> None:
    flag = SettingSource("flag", "--backend ddp", "--backend")
    launch = LaunchSettings(backend="ddp", sources={"backend": flag})
    with pytest.raises(ConflictingSettingsError) as info:
        resolve_backend(None, launch, 2, FSDPPlugin())
    _actionable(info, "Accelerator(fsdp_plugin=FSDPPlugin(...))", "`--backend ddp`",
                "change it to `--backend fsdp`")


def test_deepspeed_plugin_under_launch_backend_fsdp_is_refused() -> None:
    with pytest.raises(ConflictingSettingsError) as info:
        resolve_backend(DeepSpeedPlugin(), LaunchSettings(backend="fsdp"), 2)
    _actionable(info, "deepspeed_plugin", "backend='fsdp'")


@pytest.mark.parametrize(("launch", "plugin", "given"), [
    (NO_LAUNCH, FSDPPlugin(), "Accelerator(fsdp_plugin=FSDPPlugin(...)) on 1 process"),
    (LaunchSettings(backend="fsdp"), None, "backend 'fsdp' on 1 process"),
])
def test_fsdp_on_one_process_is_refused(launch: LaunchSettings, plugin: FSDPPlugin | None,
                                        given: str) -> None:
    with pytest.raises(ConflictingSettingsError) as info:
        resolve_backend(None, launch, 1, plugin)
    _actionable(info, given, "--num-processes 2")


def test_fsdp_on_one_process_is_refused_by_the_accelerator() -> None:
    with pytest.raises(ConflictingSettingsError) as info:
        Accelerator(cpu=True, fsdp_plugin=FSDPPlugin())  # this test process: world size 1
    _actionable(info, "on 1 process")


def test_cpu_offload_on_a_cpu_run_is_refused() -> None:
    with pytest.raises(ConflictingSettingsError) as info:
        _connect(fsdp_plugin=FSDPPlugin(cpu_offload=True))
    _actionable(info, "FSDPPlugin(cpu_offload=True) on a CPU run", "cpu_offload=False")


def test_not_a_plugin_is_refused() -> None:
    with pytest.raises(InvalidSettingError) as info:
        resolve_backend(None, NO_LAUNCH, 2, DeepSpeedPlugin())  # type: ignore[arg-type]
    _actionable(info, "fsdp_plugin=DeepSpeedPlugin", "FSDPPlugin(...)")


def test_cpu_argument_against_the_launcher_is_refused_under_fsdp_too() -> None:
    launch = LaunchSettings(backend="fsdp", cpu=True)
    with pytest.raises(ConflictingSettingsError) as info:
        _connect(launch, cpu=False, fsdp_plugin=FSDPPlugin())
    _actionable(info, "Accelerator(cpu=False)")


# -- the config file, the questionnaire, launch --------------------------------------------------------
def test_config_file_accepts_backend_fsdp_and_checks_it() -> None:
    config = from_mapping({"version": 1, "backend": "fsdp", "num_processes": 2, "cpu": True}, "f.yaml")
    assert config.to_launch_settings().to_environ() == {"ACCELERATE_CORE_BACKEND": "fsdp",
                                                         "ACCELERATE_CORE_CPU": "1"}
    with pytest.raises(ConfigFileError) as info:
        from_mapping({"version": 1, "backend": "fsdp", "num_processes": 1}, "f.yaml")
    _actionable(info, "backend='fsdp' with num_processes=1")
    with pytest.raises(ConfigFileError) as info:
        from_mapping({"version": 1, "backend": "fsdp", "num_processes": 2, "zero_stage": 3}, "f.yaml")
    _actionable(info, "zero_stage=3 with backend='fsdp'", "DeepSpeed setting")


def test_questionnaire_offers_fsdp_and_asks_for_two_processes(tmp_path: Path) -> None:
    path = tmp_path / "out" / "config.yaml"
    # cpu, backend, machines, processes (1 is refused, then 2), precision, accumulation, clipping
    answers = ["yes", "fsdp", "1", "1", "2", "bf16", "", ""]
    result = run_cli_in_process(["config", "--config-file", str(path)], cli_environ(tmp_path),
                                stdin="".join(a + "\n" for a in answers))
    assert result.returncode == 0, describe(result)
    assert "fsdp (FSDP2 fully_shard)" in result.stdout and "ZeRO stage" not in result.stdout
    assert "backend 'fsdp' needs at least 2 processes" in result.stdout
    assert load_config(path) == LaunchConfig(backend="fsdp", cpu=True, num_processes=2,
                                             mixed_precision="bf16")


def _dry_run(tmp_path: Path, *flags: str) -> tuple[int, str, str]:
    script = tmp_path / "script.py"
    script.write_text("pass\n", encoding="utf-8")
    result = run_cli_in_process(["launch", "--dry-run", *flags, str(script)], cli_environ(tmp_path))
    return result.returncode, result.stdout, result.stderr


def test_launch_backend_fsdp_passes_the_backend(tmp_path: Path) -> None:
    status, out, err = _dry_run(tmp_path, "--backend", "fsdp", "--cpu", "--num-processes", "2")
    assert status == 0, err
    assert "env: ACCELERATE_CORE_BACKEND=fsdp" in out and "--nproc-per-node 2" in out
    assert "DS_ACCELERATOR" not in out


def test_launch_backend_fsdp_on_one_process_is_refused(tmp_path: Path) -> None:
    status, _, err = _dry_run(tmp_path, "--backend", "fsdp", "--cpu")
    assert status == 2 and "backend='fsdp' with num_processes=1" in err and "Fix:" in err, err
