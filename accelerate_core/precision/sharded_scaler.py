"""Dynamic fp16 loss scaling over sharded gradients, with ONE decision for all ranks.

torch.amp.GradScaler finds non-finite gradients per process: under FSDP each rank holds only its
shard of every gradient, so an inf in rank 1's shard would skip the step on rank 1 alone and the
ranks' parameters would drift apart. This scaler unscales the local shards, then all-reduces a
"found a non-finite value" flag (MAX) over the process group, so every rank skips the same steps.

Its rules and its state_dict() keys are GradScaler's (initial scale 2**16, x2 after 2000 finite
steps, x0.5 after a non-finite one), so the loss scale it reports and the checkpoint it writes
(docs/checkpoint-format.md) read as those of the other backends.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


class ShardedLossScaler:
    def __init__(self, device: torch.device, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000) -> None:
        self.device = device
        self.scale_value = float(init_scale)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.growth_tracker = 0
        # id(optimizer) -> whether its unscaled gradients held inf/NaN on any rank
        self._found_inf: dict[int, bool] = {}

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale_value

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide this optimizer's gradients by the scale and decide, for every rank, whether
        one of them is non-finite anywhere (a collective: every rank calls it)."""
        from torch.distributed.tensor import DTensor  # only FSDP runs get here: keep imports light

        inverse = 1.0 / self.scale_value
        local_bad = False
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                param.grad.mul_(inverse)
                # The local shard: a DTensor op here would itself be a collective per tensor.
                local = param.grad.to_local() if isinstance(param.grad, DTensor) else param.grad
                local_bad = local_bad or not bool(torch.isfinite(local).all())
        flag = torch.tensor([1.0 if local_bad else 0.0], device=self.device)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        self._found_inf[id(optimizer)] = bool(flag.item())

    def is_unscaled(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether unscale_ ran for this optimizer since the last update()/forget()."""
        return id(optimizer) in self._found_inf

    def forget(self) -> None:
        """Drop the unscale records of an iteration that ended without a step."""
        self._found_inf.clear()

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Step unless a gradient was non-finite on any rank; return True when skipped."""
        if id(optimizer) not in self._found_inf:
            self.unscale_(optimizer)
        skipped = self._found_inf[id(optimizer)]
        if not skipped:
            optimizer.step()
        return skipped

    def update(self) -> None:
        """After every optimizer stepped: back off after a non-finite step, grow after
        `growth_interval` finite ones in a row."""
        if not self._found_inf:
            return
        if any(self._found_inf.values()):
            self.scale_value *= self.backoff_factor
            self.growth_tracker = 0
        else:
            self.growth_tracker += 1
            if self.growth_tracker == self.growth_interval:
                self.scale_value *= self.growth_factor
                self.growth_tracker = 0
        self._found_inf.clear()

    def get_scale(self) -> float:
        return self.scale_value

    def state_dict(self) -> dict[str, Any]:
        return {"scale": self.scale_value, "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "_growth_tracker": self.growth_tracker}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scale_value = float(state["scale"])
        self.growth_factor = float(state.get("growth_factor", self.growth_factor))
        self.backoff_factor = float(state.get("backoff_factor", self.backoff_factor))
        self.growth_interval = int(state.get("growth_interval", self.growth_interval))
        self.growth_tracker = int(state.get("_growth_tracker", 0))
