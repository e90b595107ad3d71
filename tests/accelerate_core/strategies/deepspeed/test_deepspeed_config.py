"""DeepSpeed config building and plugin checks. Pure Python: these need no deepspeed installed
(the plugin, the precision block and the merge never import it), so they are not marked
`deepspeed` and also run in the environment without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelerate_core.deepspeed_plugin import DeepSpeedPlugin
from accelerate_core.errors import ConfigFileError, ConflictingSettingsError, InvalidSettingError
from accelerate_core.precision.deepspeed import DeepSpeedPrecision
from accelerate_core.strategies.deepspeed.config import CoreValues, build_config


def core(mixed_precision: str = "no", **overrides: object) -> CoreValues:
    values: dict[str, object] = dict(
        micro_batch_size=4, world_size=2, gradient_accumulation_steps=3,
        precision_block=DeepSpeedPrecision(mixed_precision).config_block(),
        client_optimizer=True, client_scheduler=True,
    )
    values.update(overrides)
    return CoreValues(**values)  # type: ignore[arg-type]


def test_core_values_fill_the_config() -> None:
    config = build_config(DeepSpeedPlugin(zero_stage=3), core())
    assert config["train_micro_batch_size_per_gpu"] == 4
    assert config["gradient_accumulation_steps"] == 3
    assert config["train_batch_size"] == 4 * 3 * 2
    assert config["zero_optimization"]["stage"] == 3
    assert config["zero_allow_untested_optimizer"] is True
    # the user's loop owns the accumulation boundaries
    assert config["managed_gradient_accumulation"] is False
    assert config["fp16"] == {"enabled": False} and config["bf16"] == {"enabled": False}
    assert "optimizer" not in config and "scheduler" not in config


def test_fp16_block_behaves_like_torch_grad_scaler() -> None:
    import torch

    scaler = torch.amp.GradScaler("cpu")
    fp16 = build_config(DeepSpeedPlugin(zero_stage=2), core("fp16"))["fp16"]
    assert fp16["enabled"] is True and fp16["loss_scale"] == 0  # dynamic
    assert 2 ** fp16["initial_scale_power"] == scaler.get_scale()
    assert fp16["loss_scale_window"] == scaler.get_growth_interval()
    assert fp16["hysteresis"] == 1  # back off on the first overflow, as GradScaler does


def test_user_values_equal_to_core_or_auto_are_accepted() -> None:
    user = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 3,
            "zero_optimization": {"stage": 1, "reduce_bucket_size": 1000},
            "bf16": {"enabled": True}, "fp16": {"enabled": "auto"}}
    config = build_config(DeepSpeedPlugin(zero_stage=1, config=user), core("bf16"))
    assert config["train_micro_batch_size_per_gpu"] == 4
    assert config["zero_optimization"] == {"stage": 1, "reduce_bucket_size": 1000, "overlap_comm": False,
                                           "memory_efficient_linear": False}
    assert config["bf16"]["enabled"] is True and config["fp16"]["enabled"] is False
    assert user["train_micro_batch_size_per_gpu"] == "auto"  # the user's dict is not modified


def test_user_settings_override_reconciled_defaults() -> None:
    user = {"fp16": {"enabled": True, "hysteresis": 2}, "steps_per_print": 5}
    config = build_config(DeepSpeedPlugin(zero_stage=2, config=user), core("fp16"))
    assert config["fp16"]["hysteresis"] == 2 and config["steps_per_print"] == 5
    assert config["fp16"]["loss_scale_window"] == 2000  # the rest still filled in


def test_every_conflicting_key_is_listed_in_one_error() -> None:
    user = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
            "train_batch_size": 99, "fp16": {"enabled": True}, "zero_optimization": {"stage": 1},
            "optimizer": {"type": "Adam"}, "scheduler": {"type": "WarmupLR"},
            "managed_gradient_accumulation": True, "gradient_clipping": 2.0}
    with pytest.raises(ConflictingSettingsError) as info:
        build_config(DeepSpeedPlugin(zero_stage=2, gradient_clipping=1.0, config=user), core("bf16"))
    message = str(info.value)
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size",
                "fp16.enabled", "zero_optimization.stage", "optimizer:", "scheduler:",
                "managed_gradient_accumulation", "gradient_clipping"):
        assert key in message, key
    assert "9 key(s)" in message and "Fix:" in message


def test_config_from_json_file(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}, "gradient_clipping": 0.5}))
    config = build_config(DeepSpeedPlugin(zero_stage=2, config=str(path)), core())
    assert config["gradient_clipping"] == 0.5


@pytest.mark.parametrize("content", ["{not json", "[1, 2]"])
def test_bad_config_file_is_explained(tmp_path: Path, content: str) -> None:
    path = tmp_path / "ds.json"
    path.write_text(content)
    with pytest.raises(ConfigFileError, match="Fix:"):
        build_config(DeepSpeedPlugin(config=path), core())
    with pytest.raises(ConfigFileError, match="cannot be read"):
        build_config(DeepSpeedPlugin(config=tmp_path / "missing.json"), core())


@pytest.mark.parametrize("kwargs", [{"zero_stage": 4}, {"offload_optimizer_device": "nvme"},
                                    {"gradient_accumulation_steps": 0}, {"offload_param_device": "cpu"}])
def test_plugin_rejects_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidSettingError, match="Valid:"):
        DeepSpeedPlugin(**kwargs)  # type: ignore[arg-type]


def test_precision_casts_only_floating_inputs() -> None:
    import torch

    batch = {"x": torch.ones(2), "ids": torch.arange(2), "nested": [torch.zeros(1)], "name": "a"}
    cast = DeepSpeedPrecision("bf16").cast_inputs(batch)
    assert cast["x"].dtype == torch.bfloat16 and cast["nested"][0].dtype == torch.bfloat16
    assert cast["ids"].dtype == torch.int64 and cast["name"] == "a"
    assert DeepSpeedPrecision("no").cast_inputs(batch) is batch
    with pytest.raises(InvalidSettingError):
        DeepSpeedPrecision("fp8")

