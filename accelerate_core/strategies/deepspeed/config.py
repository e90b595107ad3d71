"""Build the DeepSpeed config from the plugin, the user's config and what the core knows.

The core owns some keys (batch sizes, accumulation, precision, ZeRO stage, the optimizer and
scheduler when torch ones are passed). A user value for one of them is accepted when it equals
the core's value or is "auto"; every other disagreement is collected and reported in ONE error,
so a user fixes the whole config in one go instead of one key per run.

Besides, some DeepSpeed defaults would make a run train differently from the plain-PyTorch loop
the user wrote; they are set here (only where the user did not set them), each with its reason.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelerate_core.deepspeed_plugin import DeepSpeedPlugin
from accelerate_core.errors import ConfigFileError, ConflictingSettingsError, explain

AUTO = "auto"


@dataclass(frozen=True)
class CoreValues:
    """What the core knows at `prepare` time."""

    micro_batch_size: int
    world_size: int
    gradient_accumulation_steps: int
    precision_block: dict[str, Any]
    client_optimizer: bool
    client_scheduler: bool


def load_user_config(source: dict[str, Any] | str | Path | None) -> dict[str, Any]:
    """The plugin's `config` as a fresh dict (a path is read as JSON)."""
    if source is None:
        return {}
    if isinstance(source, dict):
        return copy.deepcopy(source)
    path = Path(source)
    try:
        loaded = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigFileError(
            explain(f"DeepSpeedPlugin(config={str(source)!r})", f"the file cannot be read ({exc})",
                    "a dict or the path of a readable DeepSpeed JSON file", "check the path")
        ) from exc
    except json.JSONDecodeError as exc:
        raise ConfigFileError(
            explain(f"DeepSpeedPlugin(config={str(source)!r})", f"it is not valid JSON ({exc})",
                    "a DeepSpeed JSON config", "fix the JSON syntax at the position shown")
        ) from exc
    if not isinstance(loaded, dict):
        raise ConfigFileError(
            explain(f"DeepSpeedPlugin(config={str(source)!r})", "its top level is not a JSON object",
                    "a JSON object of DeepSpeed settings", "wrap the settings in { ... }")
        )
    return loaded


class _Merger:
    """Writes core values into the config, remembering every conflict with the user's values."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.conflicts: list[str] = []

    def require(self, dotted: str, value: Any, why: str) -> None:
        """The core's value wins; a different explicit user value is a conflict."""
        parent, key = self._parent(dotted)
        if key in parent and parent[key] != AUTO and parent[key] != value:
            self.conflicts.append(f"{dotted}: config has {parent[key]!r}, but {why} gives {value!r}")
        parent[key] = value

    def forbid(self, key: str, why: str) -> None:
        if key in self.config:
            self.conflicts.append(f"{key}: must not be in the config because {why}")

    def default(self, dotted: str, value: Any) -> None:
        """A value the user may override (also replaces "auto")."""
        parent, key = self._parent(dotted)
        if parent.get(key, AUTO) == AUTO:
            parent[key] = value

    def _parent(self, dotted: str) -> tuple[dict[str, Any], str]:
        *path, key = dotted.split(".")
        node = self.config
        for part in path:
            child = node.get(part)
            if child is None or child == AUTO:
                child = node[part] = {}
            node = child
        return node, key


def build_config(plugin: DeepSpeedPlugin, core: CoreValues) -> dict[str, Any]:
    """The full DeepSpeed config for one engine; raises ConflictingSettingsError listing every
    user key that disagrees with the core."""
    m = _Merger(load_user_config(plugin.config))

    gas = core.gradient_accumulation_steps
    m.require("train_micro_batch_size_per_gpu", core.micro_batch_size, "the prepared dataloader's batch size")
    m.require("gradient_accumulation_steps", gas, "the Accelerator's gradient_accumulation_steps")
    m.require("train_batch_size", core.micro_batch_size * gas * core.world_size,
              "micro batch x accumulation x processes")
    # The user's loop decides where accumulation ends (including a short last accumulation at
    # the end of an epoch): every optimizer.step() is a boundary, DeepSpeed must not count.
    m.require("managed_gradient_accumulation", False, "the user's loop owning accumulation boundaries")

    for block, settings in core.precision_block.items():
        enabled = settings.get("enabled", False)
        m.require(f"{block}.enabled", enabled, f"mixed_precision ({'on' if enabled else 'off'} for {block})")
        for key, value in settings.items():
            if key != "enabled" and enabled:
                m.default(f"{block}.{key}", value)

    m.require("zero_optimization.stage", plugin.zero_stage, "DeepSpeedPlugin(zero_stage=...)")
    if plugin.gradient_clipping is not None:
        m.require("gradient_clipping", plugin.gradient_clipping, "DeepSpeedPlugin(gradient_clipping=...)")
    if plugin.offload_optimizer_device != "none":
        m.require("zero_optimization.offload_optimizer.device", plugin.offload_optimizer_device,
                  "DeepSpeedPlugin(offload_optimizer_device=...)")
    if plugin.offload_param_device != "none":
        m.require("zero_optimization.offload_param.device", plugin.offload_param_device,
                  "DeepSpeedPlugin(offload_param_device=...)")
    if plugin.zero_stage == 3:
        m.require("zero_optimization.stage3_gather_16bit_weights_on_model_save",
                  plugin.zero3_save_16bit_model, "DeepSpeedPlugin(zero3_save_16bit_model=...)")

    if core.client_optimizer:
        m.forbid("optimizer", "a torch optimizer was passed to prepare() (drop one of the two)")
        # DeepSpeed refuses an optimizer it did not build under ZeRO without this flag.
        m.require("zero_allow_untested_optimizer", True, "a torch optimizer was passed to prepare()")
    if core.client_scheduler:
        m.forbid("scheduler", "a torch scheduler was passed to prepare() (drop one of the two)")

    _reconcile_defaults(m, plugin)

    if m.conflicts:
        raise ConflictingSettingsError(
            explain(
                f"DeepSpeed config {plugin.config!r}" if not isinstance(plugin.config, dict)
                else "DeepSpeedPlugin(config={...})",
                f"{len(m.conflicts)} key(s) disagree with what the core fills in:\n  - "
                + "\n  - ".join(m.conflicts) + "\n",
                'the core\'s values, or "auto" to let the core fill them in',
                "remove these keys (or set them to \"auto\"), or change the Accelerator/plugin "
                "arguments so that they agree",
            )
        )
    return m.config


def _reconcile_defaults(m: _Merger, plugin: DeepSpeedPlugin) -> None:
    """DeepSpeed defaults that would make training differ from the plain loop, pinned here."""
    # A plain loop does not clip; DeepSpeed's default is 0 (off) too, written out to be explicit.
    m.default("gradient_clipping", 0.0)
    # Gradients are reduced in fp32 like DDP does with fp32 master weights, instead of in the
    # half dtype (DeepSpeed's default communication type follows the model dtype).
    m.default("communication_data_type", "fp32")
    # Unmanaged accumulation accepts overlap_comm only for stage 2, and DeepSpeed turns it on by
    # default for stage 3; overlapping buys nothing on these tiny CPU runs anyway.
    m.default("zero_optimization.overlap_comm", False)
    # ZeRO-3 otherwise swaps torch.nn.functional.linear for its own matmul-then-add version, for
    # the whole process and beyond the engine's life ("will persist unless manually reset"): it
    # rounds differently from torch's addmm, and it changed what later DDP cells in the same
    # process computed (found by the harness's cross-environment check). Plain F.linear works
    # under ZeRO-3; the swap only saves activation memory.
    m.default("zero_optimization.memory_efficient_linear", False)
    # The client optimizer's param groups (weight decay, lr) are kept exactly as the user built them.
    m.default("zero_force_ds_cpu_optimizer", False)
    # DeepSpeed prints progress every 10 steps by default; the harness reads its own records.
    m.default("steps_per_print", 2**31 - 1)
    m.default("wall_clock_breakdown", False)
