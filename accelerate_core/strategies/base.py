"""The contract every backend implements. The Accelerator facade only delegates to it.

One class per backend (single_device.py, ddp.py, deepspeed/strategy.py, fsdp/strategy.py); no
`if backend ==` anywhere else. A strategy owns: the device, process-group setup, how
models/optimizers are wrapped, how backward and the optimizer step run, and how full state is
gathered and checkpointed. It holds one Precision object and asks it for autocast and loss
scaling where the backend does not do that itself (DeepSpeed's engine does its own).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

if TYPE_CHECKING:
    from accelerate_core.checkpoint import CheckpointReader, CheckpointWriter
    from accelerate_core.precision.base import Precision
    from accelerate_core.state import ProcessState


class Strategy(ABC):
    #: registry name(s), e.g. "single", "ddp", "zero1"
    name: ClassVar[str]

    def __init__(self, process: ProcessState, precision: Precision) -> None:
        self.process = process
        self.precision = precision
        # Accelerator(sync_batchnorm=True), set by the connector: multi-process strategies turn
        # BatchNorm layers into synchronised ones when they prepare a model (sync_batchnorm.py).
        self.sync_batchnorm = False

    @property
    @abstractmethod
    def root_device(self) -> torch.device:
        """Where this rank's model and batches live."""

    @property
    def registered_name(self) -> str:
        """The registry name of what runs (single, ddp, zero1-3): read from the strategy object,
        so a record says what ran, not what was asked for."""
        return self.name

    @property
    def emulated(self) -> bool:
        """True when the precision runs through an emulation rather than native kernels (DeepSpeed
        fp16 on a CPU without native fp16, opted into); the harness labels such runs."""
        return False

    def setup_environment(self) -> None:  # noqa: B027 - optional hook
        """Initialise the process group when the backend needs one (reuse one that exists)."""

    @abstractmethod
    def setup(
        self,
        models: Sequence[nn.Module],
        optimizers: Sequence[torch.optim.Optimizer],
        schedulers: Sequence[Any],
        micro_batch_size: int | None,
    ) -> tuple[list[nn.Module], list[Any], list[Any]]:
        """Move and wrap models, optimizers and schedulers; return them in the same order.

        `micro_batch_size` is the per-process batch size of the first prepared dataloader
        (DeepSpeed needs it in its config); None when no dataloader was prepared.
        The returned optimizers are what the AcceleratedOptimizer wraps.
        """

    @abstractmethod
    def backward(self, loss: torch.Tensor, model: nn.Module | None = None) -> None:
        """Backward on the user's (already accumulation-scaled) loss."""

    @abstractmethod
    def optimizer_step(self, optimizer: Any) -> bool:
        """Run one optimizer step; return True when it was skipped (fp16 overflow)."""

    def zero_grad(self, optimizer: Any, set_to_none: bool = True) -> None:
        optimizer.zero_grad(set_to_none=set_to_none)

    def loss_scale(self) -> float | None:
        """The current fp16 loss scale (after the last step), None when nothing scales the loss.

        The precision knows it: the GradScaler's under amp, the engine's under DeepSpeed (whose
        precision object is attached to the engine), so no backend needs to override this."""
        return self.precision.loss_scale

    @abstractmethod
    def clip_grad_norm_(
        self, parameters: Iterable[nn.Parameter], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """Clip the global gradient norm (after unscaling under fp16); return the norm."""

    @abstractmethod
    def unwrap_model(self, model: nn.Module) -> nn.Module:
        """The user's own module, without DDP/engine wrappers."""

    @abstractmethod
    def get_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The full state dict in fp32 (or its own dtype) on CPU. A collective: call on every
        rank; the main process gets the full dict (other ranks may get it too, or an empty one)."""

    def check_every_rank_arrives(self, what: str) -> None:  # noqa: B027 - optional hook
        """Raise CollectiveMisuseError when `what` (a collective) was called on some ranks only.

        The Accelerator calls it before its own barriers, which would hang instead. A no-op for
        backends that cannot detect it; DeepSpeed's strategy checks with a timeout."""

    @abstractmethod
    def save_state(self, writer: CheckpointWriter, models: Sequence[nn.Module], optimizers: Sequence[Any],
                   schedulers: Sequence[Any]) -> None:
        """Write the models (full fp32), optimizers (state per parameter name), schedulers and
        the precision's loss scaler through `writer`, in the backend-neutral format of
        docs/checkpoint-format.md (a collective: every rank calls it)."""

    @abstractmethod
    def load_state(self, reader: CheckpointReader, models: Sequence[nn.Module], optimizers: Sequence[Any],
                   schedulers: Sequence[Any]) -> None:
        """Restore what any strategy's save_state wrote, at any world size, re-partitioning as
        this backend needs (a collective)."""

    def teardown(self) -> None:  # noqa: B027 - optional hook
        """Release backend objects (engines, hooks) so a new Accelerator can start in the same
        process; the process group itself is kept for reuse."""
