"""FSDP2: `torch.distributed.fsdp.fully_shard` over a 1-D device mesh of all processes.

Each rank keeps a shard (dim-0 chunk) of every parameter, its gradient and its optimizer state;
a unit's parameters are all-gathered for its forward and backward, and gradients are
reduce-scattered (averaged) into the shards. With the sharded dataloader this trains like one
process on the global batch, as DDP does. gloo on CPU, NCCL on CUDA.

Only the public FSDP2 API is used: fully_shard, MixedPrecisionPolicy (precision/fsdp.py),
init_device_mesh, DTensor, and torch.distributed.checkpoint.state_dict (state.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from accelerate_core.checkpoint import CheckpointReader, CheckpointWriter
from accelerate_core.checkpoint.optimizer_state import owning_model
from accelerate_core.fsdp_plugin import FSDPPlugin
from accelerate_core.precision.fsdp import FSDPPrecision
from accelerate_core.strategies import torch_checkpoint
from accelerate_core.strategies.fsdp import state as fsdp_state
from accelerate_core.strategies.fsdp.wrap import ShardingReport, shard_model
from accelerate_core.strategies.single_device import SingleDeviceStrategy, _move_optimizer_state
from accelerate_core.sync_batchnorm import convert_sync_batchnorm


class FSDPStrategy(SingleDeviceStrategy):
    name = "fsdp"

    def __init__(self, process: Any, precision: FSDPPrecision, plugin: FSDPPlugin | None = None) -> None:
        super().__init__(process, precision)
        self.precision: FSDPPrecision = precision
        self.plugin = plugin if plugin is not None else FSDPPlugin()
        self._mesh: Any = None
        #: one per prepared model, in prepare order: what was sharded (evidence for records)
        self.sharding: list[ShardingReport] = []
        # id(parameter before fully_shard) -> the DTensor parameter that replaced it, kept over
        # prepare() calls: an optimizer prepared after its model still finds its parameters.
        self._replaced: dict[int, nn.Parameter] = {}

    @property
    def process_group_backend(self) -> str:
        return "nccl" if self.root_device.type == "cuda" else "gloo"

    def setup_environment(self) -> None:
        self.process.init_process_group(self.process_group_backend)

    def _device_mesh(self) -> Any:
        if self._mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            self._mesh = init_device_mesh(self.root_device.type, (self.process.world_size,))
        return self._mesh

    @property
    def wrapped_modules(self) -> list[tuple[str, ...]]:
        """Per prepared model, the qualified names of its FSDP units ("" is the model itself)."""
        return [report.wrapped for report in self.sharding]

    @property
    def unsharded_parameters(self) -> list[str]:
        """Parameters of the prepared models that stayed plain tensors (empty when all are
        DTensors, as they are whenever the root is a unit)."""
        return [name for report in self.sharding for name in report.unsharded]

    def setup(
        self,
        models: Sequence[nn.Module],
        optimizers: Sequence[torch.optim.Optimizer],
        schedulers: Sequence[Any],
        micro_batch_size: int | None,
    ) -> tuple[list[nn.Module], list[Any], list[Any]]:
        prepared: list[nn.Module] = []
        for model in models:
            model.to(self.root_device)
            if self.sync_batchnorm and self.process.world_size > 1:
                model = convert_sync_batchnorm(model)  # buffers are not sharded: keep them in step
            before = {name: p for name, p in model.named_parameters(remove_duplicate=False)}
            self.sharding.append(shard_model(model, self.plugin, self._device_mesh(), self.precision))
            after = dict(model.named_parameters(remove_duplicate=False))
            self._replaced.update({id(p): after[name] for name, p in before.items() if after[name] is not p})
            prepared.append(model)  # fully_shard changed the module in place: no wrapper
        for optimizer in optimizers:
            # fully_shard made NEW parameter objects; an optimizer built before prepare() still
            # holds the old ones, which nothing updates any more.
            fsdp_state.swap_optimizer_params(optimizer, self._replaced)
            _move_optimizer_state(optimizer, self.root_device)
            self.precision.register_optimizer(optimizer)
        self._models.extend(prepared)
        self._optimizers.extend(optimizers)
        return prepared, list(optimizers), list(schedulers)

    def clip_grad_norm_(
        self, parameters: Iterable[nn.Parameter], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        for optimizer in self._optimizers:
            self.precision.unscale_(optimizer)  # compare the threshold with unscaled norms
        params = [self._replaced.get(id(p), p) for p in parameters]
        # On DTensor gradients torch computes the norm over the full gradients (a collective),
        # not over this rank's shard; it comes back as a replicated DTensor.
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm

    def unwrap_model(self, model: nn.Module) -> nn.Module:
        # FSDP2 has no wrapper: the user's module itself, its parameters sharded DTensors
        # (get_state_dict gives the full values).
        return model

    def get_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return fsdp_state.full_state_dict(model)

    def save_state(self, writer: CheckpointWriter, models: Sequence[nn.Module], optimizers: Sequence[Any],
                   schedulers: Sequence[Any]) -> None:
        # Every step below is a collective on every rank; only the main process writes.
        scaler = torch_checkpoint.scaler_to_neutral(self.precision.state_dict().get("scaler"))
        for i, model in enumerate(models):
            state = fsdp_state.save_model(model)
            if writer.is_main:
                writer.model(i, state)
        for i, optimizer in enumerate(optimizers):
            index, _ = owning_model([g["params"] for g in optimizer.param_groups], models)
            neutral = fsdp_state.export_optimizer(index, models[index], optimizer, f"optimizer {i}")
            if writer.is_main and neutral is not None:
                writer.optimizer(i, neutral)
        if writer.is_main:
            for i, scheduler in enumerate(schedulers):
                writer.scheduler(i, scheduler)
            writer.precision(self.precision.mixed_precision, scaler)

    def load_state(self, reader: CheckpointReader, models: Sequence[nn.Module], optimizers: Sequence[Any],
                   schedulers: Sequence[Any]) -> None:
        for i, model in enumerate(models):
            # A DTensor's shape is the full one: what the checkpoint must hold.
            expected = {k: v.shape for k, v in model.state_dict().items()}
            fsdp_state.load_model(model, reader.model(i, expected))
        for i, optimizer in enumerate(optimizers):
            fsdp_state.import_optimizer(models, optimizer, reader.optimizer(i), f"optimizer {i}")
        for i, scheduler in enumerate(schedulers):
            scheduler.load_state_dict(reader.scheduler(i))
        scaler = torch_checkpoint.scaler_from_neutral(reader.precision().get("loss_scaler"))
        if scaler is not None:
            self.precision.load_state_dict({"scaler": scaler})

    def teardown(self) -> None:
        # The sharded modules keep their hooks, but they belong to this run only; drop every
        # reference so the next Accelerator of the launch builds its own mesh and units. The
        # process group stays.
        super().teardown()
        self.sharding.clear()
        self._replaced.clear()
        self._mesh = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
