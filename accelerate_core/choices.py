"""The valid values of the settings several modules check: defined once, here.

The launcher (launch/settings.py), the config file (launch/config.py), the connector and the
DeepSpeed and FSDP plugins and precisions all validate against these tuples; one owner keeps them
from drifting apart. This module imports nothing, so anything (including `import accelerate_core`, which must
not pull in torch or deepspeed) can use it.
"""

from __future__ import annotations

BACKENDS = ("single", "ddp", "deepspeed", "fsdp")
MIXED_PRECISIONS = ("no", "fp16", "bf16")  # "no" is fp32
ZERO_STAGES = (0, 1, 2, 3)
OFFLOAD_DEVICES = ("none", "cpu")  # DeepSpeed offload targets; "none" keeps the data on the device
