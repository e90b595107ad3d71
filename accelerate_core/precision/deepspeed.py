"""Precision under DeepSpeed: the engine does the casting and loss scaling itself.

This object only decides what goes into the DeepSpeed config's precision block and which dtype
floating-point inputs are cast to, so that fp32 batches from an ordinary dataloader work with a
bf16/fp16 engine (whose weights are half precision) without changing the user's loop.

The loss-scaling defaults are chosen to behave like `torch.amp.GradScaler`, the plain-PyTorch
reference: DeepSpeed's own defaults (hysteresis 2, window 1000) would keep the scale through the
first overflow and grow it twice as often, which makes a run diverge from the reference in the
steps it skips. A user who wants DeepSpeed's behaviour can say so in the plugin's config.

One difference cannot be configured away: DeepSpeed's fp16 engine holds the model, and so the
gradients and their accumulation over micro-batches, in fp16, where amp keeps fp32 gradients.
Values differ by fp16 rounding of gradients (measured on CPU: ~2.5e-4 on weights), and a large
gradient x loss scale overflows earlier than under amp, so such a run may skip a step amp would
not. The skipped steps are reported (optimizer.is_overflow), never hidden.

Floating buffers. DeepSpeed 0.19 casts the parameters to fp16/bf16 but keeps buffers in their
own dtype (fp32; its `data_types.buffer_dtype` option would cast them). Alone, a model whose
forward feeds an fp32 buffer into a matmul with half activations then fails with a dtype
mismatch ("expected both ... same dtype"), and an fp32 buffer added to half activations silently
promotes them to fp32. The reference here is torch.autocast (the amp golden): buffers stay fp32,
matmul-like ops cast their operands to the half dtype, element-wise ops promote, and losses and
reductions on autocast's fp32 list run in fp32. Casting the buffers (buffer_dtype) would differ
from that: buffers rounded to half precision for good (running statistics accumulating in bf16)
and element-wise results in half. So buffers keep their dtype and the engine's forward runs under
torch.autocast of the engine dtype (`uses_autocast`; the strategy wraps the engine's forward):
with the weights already half, autocast changes nothing for them, and the buffers and ops behave
as in the reference. Tested in
tests/accelerate_core/strategies/deepspeed/test_deepspeed_reconcile.py.

BatchNorm is the one layer autocast alone cannot reconcile: the engine made its weight and bias
half while its running statistics stayed fp32, a combination torch's batch_norm refuses
("expected scalar type Half but found Float"). Under autocast on a plain model the layer has
fp32 weights and statistics, a half input and a half output; the strategy reproduces that by
presenting the weight and bias as fp32 during each BatchNorm forward
(strategies/deepspeed/batchnorm.py; tested in tests/accelerate_core/test_batchnorm_training.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from accelerate_core.choices import MIXED_PRECISIONS
from accelerate_core.errors import InvalidSettingError, explain
from accelerate_core.precision.base import Precision

# torch.amp.GradScaler defaults: init_scale 2**16, growth_interval 2000, backoff on every overflow.
GRAD_SCALER_EQUIVALENT_FP16: dict[str, Any] = {
    "enabled": True,
    "loss_scale": 0,  # 0 = dynamic loss scaling
    "initial_scale_power": 16,
    "loss_scale_window": 2000,
    "hysteresis": 1,
    "consecutive_hysteresis": False,
    "min_loss_scale": 1,
}


class DeepSpeedPrecision(Precision):
    """`mixed_precision` is "no", "fp16" or "bf16"; the engine applies it."""

    def __init__(self, mixed_precision: str = "no") -> None:
        if mixed_precision not in MIXED_PRECISIONS:
            raise InvalidSettingError(
                explain(
                    f"mixed_precision={mixed_precision!r} for DeepSpeed",
                    "it is not a precision the DeepSpeed engine can run",
                    MIXED_PRECISIONS,
                    "pass one of the valid values to Accelerator(mixed_precision=...)",
                )
            )
        self.mixed_precision = mixed_precision
        self._engine: Any = None  # set by the strategy once the engine exists
        self.device_type = "cpu"  # the strategy sets the engine's device type (autocast needs it)

    def attach(self, engine: Any) -> None:
        """The engine whose loss scale `loss_scale` reports (None: detached at teardown)."""
        self._engine = engine

    @property
    def loss_scale(self) -> float | None:
        """The engine's current dynamic loss scale under fp16 (after the last step), else None.

        DeepSpeed has no public accessor: its fp16 optimizers (ZeRO 1-3, fused and unfused) keep
        the scale as `loss_scale`, older ones as `cur_scale`, a float or a 0-dim tensor."""
        if self.mixed_precision != "fp16" or self._engine is None:
            return None
        optimizer = getattr(self._engine, "optimizer", None)
        for name in ("loss_scale", "cur_scale"):
            value = getattr(optimizer, name, None)
            if isinstance(value, (int, float, torch.Tensor)) and not isinstance(value, bool):
                return float(value)
        return None

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the engine's model weights (and of the inputs it is given)."""
        return {"no": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[self.mixed_precision]

    @property
    def is_half(self) -> bool:
        return self.mixed_precision != "no"

    @property
    def uses_autocast(self) -> bool:
        return self.is_half

    def autocast(self) -> AbstractContextManager[Any]:
        """torch.autocast of the engine dtype (see the module docstring: floating buffers)."""
        if not self.is_half:
            return nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def config_block(self) -> dict[str, Any]:
        """The precision keys of the DeepSpeed config (merged with the user's by the strategy)."""
        if self.mixed_precision == "fp16":
            return {"fp16": dict(GRAD_SCALER_EQUIVALENT_FP16), "bf16": {"enabled": False}}
        if self.mixed_precision == "bf16":
            return {"bf16": {"enabled": True}, "fp16": {"enabled": False}}
        return {"fp16": {"enabled": False}, "bf16": {"enabled": False}}

    def cast_inputs(self, value: Any) -> Any:
        """Cast floating-point tensors in a nested batch to the engine dtype; others unchanged."""
        if not self.is_half:
            return value
        if isinstance(value, torch.Tensor):
            return value.to(self.dtype) if value.is_floating_point() else value
        if isinstance(value, Mapping):
            return type(value)({k: self.cast_inputs(v) for k, v in value.items()})  # type: ignore[call-arg]
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
            return type(value)(*(self.cast_inputs(v) for v in value))
        if isinstance(value, (list, tuple)):
            return type(value)(self.cast_inputs(v) for v in value)
        return value

    # The engine casts, scales and steps itself: the base class's autocast, scale and step stay
    # pass-throughs, and the strategy never calls them for the engine's work.
