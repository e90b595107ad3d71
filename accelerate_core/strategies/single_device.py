"""One process on one device (the CPU or one CUDA device): no process group, no wrappers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

from accelerate_core.checkpoint import CheckpointReader, CheckpointWriter
from accelerate_core.precision.base import unwrap_forward
from accelerate_core.strategies import torch_checkpoint
from accelerate_core.strategies.base import Strategy


class SingleDeviceStrategy(Strategy):
    name = "single"

    def __init__(self, process: Any, precision: Any) -> None:
        super().__init__(process, precision)
        self._models: list[nn.Module] = []
        self._optimizers: list[Any] = []

    @property
    def root_device(self) -> torch.device:
        return self.process.device

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """Hook for subclasses that wrap the moved model (DDP)."""
        return model

    def setup(
        self,
        models: Sequence[nn.Module],
        optimizers: Sequence[torch.optim.Optimizer],
        schedulers: Sequence[Any],
        micro_batch_size: int | None,
    ) -> tuple[list[nn.Module], list[Any], list[Any]]:
        wrapped: list[nn.Module] = []
        for model in models:
            # Module.to() swaps parameter data in place, so optimizers built on the parameters
            # before prepare() keep pointing at the moved ones.
            model.to(self.root_device)
            outer = self.wrap_model(model)
            self.precision.wrap_forward(outer)
            wrapped.append(outer)
        for optimizer in optimizers:
            _move_optimizer_state(optimizer, self.root_device)
            self.precision.register_optimizer(optimizer)
        self._models.extend(wrapped)
        self._optimizers.extend(optimizers)
        return wrapped, list(optimizers), list(schedulers)

    def backward(self, loss: torch.Tensor, model: nn.Module | None = None) -> None:
        self.precision.backward(loss)

    def optimizer_step(self, optimizer: Any) -> bool:
        return self.precision.step(optimizer)

    def clip_grad_norm_(
        self, parameters: Iterable[nn.Parameter], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        # Gradients are still multiplied by the loss scale under fp16: unscale them first, or
        # the clip threshold would be compared with scaled norms.
        for optimizer in self._optimizers:
            self.precision.unscale_(optimizer)
        return torch.nn.utils.clip_grad_norm_(list(parameters), max_norm, norm_type=norm_type)

    def unwrap_model(self, model: nn.Module) -> nn.Module:
        return model

    def get_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        state = self.unwrap_model(model).state_dict()
        return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}

    def save_state(self, writer: CheckpointWriter, models: Sequence[nn.Module], optimizers: Sequence[Any],
                   schedulers: Sequence[Any]) -> None:
        states = [self.get_state_dict(m) for m in models] if writer.is_main else [{} for _ in models]
        torch_checkpoint.save(writer, states, [self.unwrap_model(m) for m in models], optimizers,
                              schedulers, self.precision)

    def load_state(self, reader: CheckpointReader, models: Sequence[nn.Module], optimizers: Sequence[Any],
                   schedulers: Sequence[Any]) -> None:
        torch_checkpoint.load(reader, [self.unwrap_model(m) for m in models], optimizers, schedulers,
                              self.precision)

    def teardown(self) -> None:
        for model in self._models:
            unwrap_forward(model)
        self._models.clear()
        self._optimizers.clear()


def _move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """An optimizer that already stepped holds state tensors; keep them beside the params."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and key != "step":
                state[key] = value.to(device)
