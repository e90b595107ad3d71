"""`DeepSpeedPlugin`: how the user asks for DeepSpeed. Importable without deepspeed.

Values the core knows (micro batch size from the prepared dataloader, gradient accumulation,
the precision block, the optimizer and scheduler when torch ones are passed) are filled into the
DeepSpeed config at `prepare`; `config` carries anything else. The DeepSpeed strategy owns the
validation and merging (see strategies/deepspeed.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
