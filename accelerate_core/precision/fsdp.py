"""Mixed precision as FSDP2 does it (docs/fsdp.md): the sharded parameters stay fp32 (the master
copy the optimizer steps), `fully_shard` all-gathers them cast to `param_dtype` for the forward
and backward, and reduce-scatters gradients in `reduce_dtype` (fp32 here) into fp32 shards.

So no autocast wraps the forward (FSDP casts the parameters and the unit's floating inputs); the
root unit returns fp32 outputs (`output_dtype`), so the user's loss is computed in fp32 as under
the other backends. fp16 adds loss scaling with one skip decision for all ranks
(sharded_scaler.py). `accelerator.autocast()` still gives a torch.autocast context for what the
user computes outside the model.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import torch

from accelerate_core.precision.base import Precision
from accelerate_core.precision.sharded_scaler import ShardedLossScaler

if TYPE_CHECKING:
    from torch.distributed.fsdp import MixedPrecisionPolicy

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class FSDPPrecision(Precision):
    """`mixed_precision`: "no", "fp16" or "bf16"; `device`: where gradients live (the flag of the
    scaler's all-reduce goes there)."""

    def __init__(self, mixed_precision: str, device: torch.device) -> None:
        if mixed_precision not in ("no", *_DTYPES):
            raise ValueError(f"FSDPPrecision takes 'no', 'fp16' or 'bf16', got {mixed_precision!r}")
        self.mixed_precision = mixed_precision
        self.device_type = device.type
        self.param_dtype: torch.dtype | None = _DTYPES.get(mixed_precision)
        self.scaler = ShardedLossScaler(device) if mixed_precision == "fp16" else None
        self._registered: set[int] = set()  # optimizers the strategy set up
        self._stepped: set[int] = set()  # optimizers stepped since the last update()

    def policy(self, root: bool, fp32: bool = False) -> MixedPrecisionPolicy:
        """The policy of one fully_shard unit; `root`: the outermost one (fp32 outputs); `fp32`:
        a unit that computes in fp32 under a half policy (a BatchNorm: its running statistics
        are fp32 buffers, which batch_norm will not mix with half weights).

        An fp32 unit gets its inputs cast to fp32 (FSDP's cast_forward_inputs) and casts its
        outputs back to the half dtype, because the module after it may sit in the same half
        unit (Linear, BatchNorm, Linear in one nn.Sequential), where no unit boundary casts."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        if self.param_dtype is None:
            return MixedPrecisionPolicy()
        output = torch.float32 if root else (self.param_dtype if fp32 else None)
        compute = torch.float32 if fp32 else self.param_dtype
        return MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32, output_dtype=output)

    def autocast(self) -> AbstractContextManager[Any]:
        if self.param_dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.param_dtype)

    def register_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        self._registered.add(id(optimizer))

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        if self.scaler is None:
            return loss
        self._update()  # a new backward starts a new iteration: settle the last one's scale
        return self.scaler.scale(loss)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        # Idempotent per step: clip_grad_norm_ may be called more than once before the step.
        if self.scaler is not None and not self.scaler.is_unscaled(optimizer):
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        if self.scaler is None:
            optimizer.step()
            return False
        if id(optimizer) in self._stepped:  # stepped twice without a backward in between
            self._update()
        skipped = self.scaler.step(optimizer)
        self._stepped.add(id(optimizer))
        if self._stepped >= self._registered:
            self._update()
        return skipped

    def _update(self) -> None:
        """Once per iteration, after every optimizer stepped (as AMPPrecision does)."""
        if self.scaler is not None:
            if self._stepped:
                self.scaler.update()
            else:
                self.scaler.forget()
        self._stepped.clear()

    @property
    def loss_scale(self) -> float | None:
        return self.scaler.get_scale() if self.scaler is not None else None

    def state_dict(self) -> dict[str, Any]:
        self._update()
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
