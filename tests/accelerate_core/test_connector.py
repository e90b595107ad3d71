"""Bad and conflicting settings: one exception type per kind, each message actionable."""

from __future__ import annotations

import pytest
import torch

from accelerate_core import (
    Accelerator,
    ConflictingSettingsError,
    DeepSpeedPlugin,
    InvalidSettingError,
    MissingDependencyError,
    UnsupportedObjectError,
)
from accelerate_core import imports as core_imports
from accelerate_core.connector import build_deepspeed_plugin, resolve_backend, resolve_mixed_precision
from accelerate_core.launch.settings import LaunchSettings

# Its outcome depends on whether deepspeed is installed: tests(nodeepspeed) runs it too.
pytestmark = pytest.mark.nodeepspeed

NO_LAUNCH = LaunchSettings()


def _assert_actionable(message: str, *fragments: str) -> None:
    assert "Valid:" in message and "Fix:" in message
    for fragment in fragments:
        assert fragment in message


def test_unknown_mixed_precision() -> None:
    with pytest.raises(InvalidSettingError) as info:
        Accelerator(mixed_precision="fp8", cpu=True)
    _assert_actionable(str(info.value), "'fp8'", "'bf16'")


@pytest.mark.parametrize(("fp16", "mixed"), [(True, "bf16"), (True, "no"), (False, "fp16")])
def test_fp16_and_mixed_precision_disagree(fp16: bool, mixed: str) -> None:
    with pytest.raises(ConflictingSettingsError) as info:
        Accelerator(fp16=fp16, mixed_precision=mixed, cpu=True)
    _assert_actionable(str(info.value), "fp16=")


def test_fp16_alias_agrees_with_mixed_precision() -> None:
    assert resolve_mixed_precision(True, None, NO_LAUNCH) == "fp16"
    assert resolve_mixed_precision(True, "fp16", NO_LAUNCH) == "fp16"
    assert resolve_mixed_precision(None, None, NO_LAUNCH) == "no"
    assert resolve_mixed_precision(False, None, LaunchSettings(mixed_precision="bf16")) == "bf16"


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_gradient_accumulation_below_one_or_not_int(value: object) -> None:
    with pytest.raises(InvalidSettingError) as info:
        Accelerator(gradient_accumulation_steps=value, cpu=True)  # type: ignore[arg-type]
    _assert_actionable(str(info.value), "gradient_accumulation_steps")


def test_prepare_rejects_unknown_objects() -> None:
    accelerator = Accelerator(cpu=True)
    with pytest.raises(UnsupportedObjectError) as info:
        accelerator.prepare(torch.nn.Linear(2, 2), {"not": "preparable"})
    _assert_actionable(str(info.value), "builtins.dict", "DataLoader")


def test_argument_contradicting_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_CORE_MIXED_PRECISION", "bf16")
    with pytest.raises(ConflictingSettingsError) as info:
        Accelerator(fp16=True, cpu=True)
    _assert_actionable(str(info.value), "'fp16'", "'bf16'", "ACCELERATE_CORE_")
    # Left out, the argument takes the launcher's value.
    assert Accelerator(cpu=True).mixed_precision == "bf16"


def test_launcher_values_fill_unset_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_CORE_GRADIENT_ACCUMULATION_STEPS", "4")
    monkeypatch.setenv("ACCELERATE_CORE_CPU", "1")
    accelerator = Accelerator()
    assert accelerator.gradient_accumulation_steps == 4
    assert accelerator.device == torch.device("cpu")
    with pytest.raises(ConflictingSettingsError):
        Accelerator(gradient_accumulation_steps=2)


def test_backend_rules() -> None:
    assert resolve_backend(None, NO_LAUNCH, 1) == "single"
    assert resolve_backend(None, NO_LAUNCH, 2) == "ddp"
    assert resolve_backend(DeepSpeedPlugin(), NO_LAUNCH, 1) == "deepspeed"
    assert resolve_backend(None, LaunchSettings(backend="deepspeed"), 2) == "deepspeed"
    with pytest.raises(ConflictingSettingsError):
        resolve_backend(None, LaunchSettings(backend="single"), 2)
    with pytest.raises(ConflictingSettingsError):
        resolve_backend(DeepSpeedPlugin(), LaunchSettings(backend="ddp"), 2)
    with pytest.raises(InvalidSettingError):
        resolve_backend({"zero_stage": 2}, NO_LAUNCH, 1)  # type: ignore[arg-type]


def test_deepspeed_plugin_merge() -> None:
    launch = LaunchSettings(zero_stage=3, offload_optimizer_device="cpu")
    merged = build_deepspeed_plugin(None, launch, gas=2)
    assert (merged.zero_stage, merged.offload_optimizer_device, merged.gradient_accumulation_steps) == (
        3,
        "cpu",
        2,
    )
    user = DeepSpeedPlugin(zero_stage=1)
    assert build_deepspeed_plugin(user, LaunchSettings(), gas=1).zero_stage == 1
    assert user.gradient_accumulation_steps is None  # the user's object is not modified
    with pytest.raises(ConflictingSettingsError):
        build_deepspeed_plugin(user, launch, gas=1)
    with pytest.raises(ConflictingSettingsError):
        build_deepspeed_plugin(DeepSpeedPlugin(gradient_accumulation_steps=4), LaunchSettings(), gas=2)


def test_bad_zero_stage() -> None:
    with pytest.raises(InvalidSettingError) as info:
        Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=4), cpu=True)
    _assert_actionable(str(info.value), "zero_stage=4")


def test_deepspeed_absent_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pretend the package cannot be found (the availability check, not deepspeed, is replaced).
    monkeypatch.setattr(core_imports, "is_deepspeed_available", lambda: False)
    with pytest.raises(MissingDependencyError) as info:
        Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2), cpu=True)
    assert isinstance(info.value, ImportError)
    _assert_actionable(str(info.value), "pip install deepspeed", "zero2")


def test_bad_launcher_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(InvalidSettingError) as info:
        Accelerator(cpu=True)
    _assert_actionable(str(info.value), "WORLD_SIZE")
