"""`DeepSpeedPlugin`: how the user asks for DeepSpeed. Importable without deepspeed.

Values the core knows (micro batch size from the prepared dataloader, gradient accumulation,
the precision block, the optimizer and scheduler when torch ones are passed) are filled into the
DeepSpeed config at `prepare`; `config` carries anything else. The DeepSpeed strategy owns the
merging (strategies/deepspeed/config.py); this file only checks each field on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelerate_core.choices import OFFLOAD_DEVICES, ZERO_STAGES
from accelerate_core.errors import InvalidSettingError, explain


@dataclass
class DeepSpeedPlugin:
    zero_stage: int = 2
    gradient_accumulation_steps: int | None = None  # None: take the Accelerator's value
    gradient_clipping: float | None = None
    offload_optimizer_device: str = "none"  # "none" | "cpu"
    offload_param_device: str = "none"  # "none" | "cpu" (ZeRO-3 only)
    zero3_save_16bit_model: bool = True
    # A DeepSpeed config as a dict or a path to a JSON file, for anything not covered above.
    config: dict[str, Any] | str | Path | None = None
    # DeepSpeed refuses fp16 on a CPU without native fp16 support. Setting this opts in to an
    # emulation through DeepSpeed's public set_accelerator(); runs made so are labelled emulated.
    cpu_fp16_emulation: bool = False
    # How long get_state_dict/save_state/load_state wait for every rank before reporting that
    # they were called on some ranks only (they are collectives; a missing rank would hang them).
    collective_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        checks: list[tuple[str, object, bool, str]] = [
            ("zero_stage", self.zero_stage, self.zero_stage in ZERO_STAGES, str(ZERO_STAGES)),
            ("gradient_accumulation_steps", self.gradient_accumulation_steps,
             self.gradient_accumulation_steps is None
             or (isinstance(self.gradient_accumulation_steps, int) and self.gradient_accumulation_steps >= 1),
             "None or a whole number >= 1"),
            ("gradient_clipping", self.gradient_clipping,
             self.gradient_clipping is None or self.gradient_clipping >= 0, "None or a number >= 0"),
            ("offload_optimizer_device", self.offload_optimizer_device,
             self.offload_optimizer_device in OFFLOAD_DEVICES, str(OFFLOAD_DEVICES)),
            ("offload_param_device", self.offload_param_device,
             self.offload_param_device in OFFLOAD_DEVICES, str(OFFLOAD_DEVICES)),
            ("collective_timeout_s", self.collective_timeout_s, self.collective_timeout_s > 0,
             "a number > 0"),
        ]
        for name, value, ok, valid in checks:
            if not ok:
                raise InvalidSettingError(
                    explain(f"DeepSpeedPlugin({name}={value!r})", "the value is out of range", valid,
                            f"pass a valid {name}")
                )
        if self.offload_param_device != "none" and self.zero_stage != 3:
            raise InvalidSettingError(
                explain(
                    f"DeepSpeedPlugin(offload_param_device={self.offload_param_device!r}, "
                    f"zero_stage={self.zero_stage})",
                    "only ZeRO stage 3 partitions (and so can offload) parameters",
                    "offload_param_device='none', or zero_stage=3",
                    "use zero_stage=3 or drop offload_param_device",
                )
            )
