"""DistributedDataParallel: one process per device, gradients averaged by all-reduce.

gloo on CPU, NCCL on CUDA. With the sharded dataloader (each rank takes its block of B of every
global batch of N x B) the averaged gradient equals the gradient of the mean loss over the global
batch, so N ranks train like one process with batch N x B.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from accelerate_core.precision.base import unwrap_forward
from accelerate_core.strategies.single_device import SingleDeviceStrategy
from accelerate_core.sync_batchnorm import convert_sync_batchnorm


class DDPStrategy(SingleDeviceStrategy):
    name = "ddp"

    def __init__(self, process: Any, precision: Any) -> None:
        super().__init__(process, precision)
        self._inner: list[nn.Module] = []

    @property
    def process_group_backend(self) -> str:
        return "nccl" if self.root_device.type == "cuda" else "gloo"

    def setup_environment(self) -> None:
        self.process.init_process_group(self.process_group_backend)

    def wrap_model(self, model: nn.Module) -> nn.Module:
        if self.sync_batchnorm and self.process.world_size > 1:
            # Global batch statistics; the layers keep their parameter objects (sync_batchnorm.py).
            model = convert_sync_batchnorm(model)
        # DDP refuses a module with nothing to train; such a model needs no gradient sync.
        if not any(p.requires_grad for p in model.parameters()):
            return model
        self._inner.append(model)
        device_ids = [self.root_device.index] if self.root_device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)

    def unwrap_model(self, model: nn.Module) -> nn.Module:
        return model.module if isinstance(model, DistributedDataParallel) else model

    def teardown(self) -> None:
        # Undo the forward patch on the wrappers and drop them (their reducers hold buckets);
        # the process group stays for the next Accelerator of this launch.
        super().teardown()
        for model in self._inner:
            unwrap_forward(model)
        self._inner.clear()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
