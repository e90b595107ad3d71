"""The facade users import. It holds one strategy and one precision and only delegates:
backend rules live in the connector, backend behaviour in strategies/ and precision/."""

from __future__ import annotations

import builtins
import gc
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau
from torch.utils.data import DataLoader

import accelerate_core.ops as ops
import accelerate_core.recording as recording
from accelerate_core.checkpoint import CheckpointError, CheckpointReader, CheckpointWriter
from accelerate_core.checkpoint.atomic import atomic_save
from accelerate_core.checkpoint.layout import write_tensors
from accelerate_core.connector import Resolved, connect
from accelerate_core.data import DataState, PreparedDataLoader, SkippedDataLoader
from accelerate_core.deepspeed_plugin import DeepSpeedPlugin
from accelerate_core.errors import UnsupportedObjectError, explain
from accelerate_core.fsdp_plugin import FSDPPlugin
from accelerate_core.observers import Observer, Observers
from accelerate_core.optimizer import AcceleratedOptimizer, AcceleratedScheduler
from accelerate_core.precision.base import Precision
from accelerate_core.strategies.base import Strategy

_PREPARABLE = "torch.nn.Module, torch.optim.Optimizer, torch.utils.data.DataLoader, an LR scheduler"


class Accelerator:
    def __init__(
        self,
        fp16: bool | None = None,
        mixed_precision: str | None = None,
        cpu: bool | None = None,
        gradient_accumulation_steps: int | None = None,
        deepspeed_plugin: DeepSpeedPlugin | None = None,
        sync_batchnorm: bool | None = None,
        fsdp_plugin: FSDPPlugin | None = None,
        observers: Iterable[Observer] = (),
    ) -> None:
        # sync_batchnorm=True: BatchNorm layers use the statistics of the global batch on
        # multi-process runs (accelerate_core/sync_batchnorm.py); None: the launcher's value, else off.
        # fsdp_plugin: shard the model with FSDP2 (docs/fsdp.md); `launch --backend fsdp` gives
        # the same with FSDPPlugin()'s defaults.
        # observers: told of every prepare, backward, optimizer step, gather and state dict
        # (accelerate_core/observers.py); process-wide ones (observers.register) hear too.
        self._resolved, self._process, self._strategy = connect(
            fp16=fp16, mixed_precision=mixed_precision, cpu=cpu,
            gradient_accumulation_steps=gradient_accumulation_steps, deepspeed_plugin=deepspeed_plugin,
            sync_batchnorm=sync_batchnorm, fsdp_plugin=fsdp_plugin,
        )
        self._strategy.setup_environment()
        self._data_state = DataState()
        self._models: list[nn.Module] = []
        self._optimizers: list[AcceleratedOptimizer] = []
        self._schedulers: list[AcceleratedScheduler] = []
        self._dataloaders: list[PreparedDataLoader] = []
        # A tool asking for a record (ACCELERATE_CORE_RECORD_DIR, recording.py) gets its
        # recorder registered as a process-wide observer; otherwise nothing is watched.
        recording.register_from_environment(self.is_main_process)
        self._observers = Observers(self, observers)

    # -- what was decided ------------------------------------------------------------------
    @property
    def strategy(self) -> Strategy:
        return self._strategy

    @property
    def precision(self) -> Precision:
        return self._strategy.precision

    @property
    def settings(self) -> Resolved:
        return self._resolved

    @property
    def mixed_precision(self) -> str:
        return self._resolved.mixed_precision

    @property
    def gradient_accumulation_steps(self) -> int:
        return self._resolved.gradient_accumulation_steps

    def loss_scale(self) -> float | None:
        """The current fp16 loss scale (amp's GradScaler or DeepSpeed's engine), else None."""
        return self._strategy.loss_scale()

    @property
    def device(self) -> torch.device:
        return self._strategy.root_device

    @property
    def num_processes(self) -> int:
        return self._process.world_size

    @property
    def process_index(self) -> int:
        return self._process.rank

    @property
    def local_process_index(self) -> int:
        return self._process.local_rank

    @property
    def is_main_process(self) -> bool:
        return self._process.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        return self._process.is_local_main_process

    # -- prepare -------------------------------------------------------------------------------
    def prepare(self, *objects: Any) -> Any:
        """Prepare models, optimizers, dataloaders and schedulers given in any order; return them
        prepared, in the same order (one object alone comes back unpacked)."""
        for obj in objects:
            if not isinstance(obj, (nn.Module, torch.optim.Optimizer, DataLoader, LRScheduler,
                                    ReduceLROnPlateau)):
                raise UnsupportedObjectError(
                    explain(f"prepare() got a {type(obj).__module__}.{type(obj).__qualname__}",
                            "the core does not know how to prepare it", _PREPARABLE,
                            "pass only those objects; use anything else as it is")
                )
            if isinstance(obj, (AcceleratedOptimizer, PreparedDataLoader)):
                raise UnsupportedObjectError(
                    explain(f"prepare() got an already prepared {type(obj).__name__}",
                            "an object is prepared once", "the original object", "pass the original")
                )
        result: list[Any] = list(objects)
        # Dataloaders first: their per-process batch size goes into the strategy (DeepSpeed).
        micro_batch_size: int | None = None
        for i, obj in enumerate(objects):
            if isinstance(obj, DataLoader):
                loader = PreparedDataLoader(obj, self.process_index, self.num_processes, self.device,
                                            self._data_state)
                self._dataloaders.append(loader)
                micro_batch_size = micro_batch_size or loader.batch_size
                result[i] = loader
        if micro_batch_size is None and self._dataloaders:
            micro_batch_size = self._dataloaders[0].batch_size
        model_idx = [i for i, o in enumerate(objects) if isinstance(o, nn.Module)]
        opt_idx = [i for i, o in enumerate(objects) if isinstance(o, torch.optim.Optimizer)]
        sched_idx = [i for i, o in enumerate(objects) if isinstance(o, (LRScheduler, ReduceLROnPlateau))]
        if model_idx or opt_idx or sched_idx:
            models, optimizers, schedulers = self._strategy.setup(
                [objects[i] for i in model_idx], [objects[i] for i in opt_idx],
                [objects[i] for i in sched_idx], micro_batch_size,
            )
            for i, model in zip(model_idx, models, strict=True):
                result[i] = model
                self._models.append(model)
            for i, optimizer in zip(opt_idx, optimizers, strict=True):
                result[i] = AcceleratedOptimizer(optimizer, self._strategy, original=objects[i],
                                                 observers=self._observers)
                self._optimizers.append(result[i])
            for i, scheduler in zip(sched_idx, schedulers, strict=True):
                result[i] = AcceleratedScheduler(scheduler, self._optimizers_of(objects[i]))
                self._schedulers.append(result[i])
        self._observers.notify_before("on_prepare", tuple(result))
        return result[0] if len(result) == 1 else tuple(result)

    def _optimizers_of(self, scheduler: Any) -> list[AcceleratedOptimizer]:
        target = getattr(scheduler, "optimizer", None)  # the user's optimizer, or a prepared one
        own = [o for o in self._optimizers if target is o or target is o.original]
        return own or list(self._optimizers)

    # -- training ------------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, model: nn.Module | None = None) -> None:
        self._observers.notify_before("before_backward", loss)
        self._strategy.backward(loss, model)
        self._observers.notify_after("after_backward", loss)

    def clip_grad_norm_(self, parameters: Iterable[nn.Parameter], max_norm: float,
                        norm_type: float = 2.0) -> torch.Tensor:
        return self._strategy.clip_grad_norm_(parameters, max_norm, norm_type)

    def autocast(self) -> AbstractContextManager[Any]:
        return self.precision.autocast()

    def unwrap_model(self, model: nn.Module) -> nn.Module:
        return self._strategy.unwrap_model(model)

    def skip_first_batches(self, dataloader: PreparedDataLoader,
                           num_batches: int | None = None) -> SkippedDataLoader:
        """One pass over a prepared dataloader starting at batch `num_batches`; without it, at
        the position load_state restored (0 when none): how a loop resumes mid-epoch
        (docs/checkpoint-format.md). The returned loader's `.skip` is the number left out."""
        return SkippedDataLoader(dataloader, num_batches)

    # -- collectives ---------------------------------------------------------------------------
    def gather(self, data: Any) -> Any:
        gathered = ops.gather(data)
        self._observers.notify_before("on_gather", gathered)
        return gathered

    def gather_for_metrics(self, data: Any) -> Any:
        """gather(), minus the samples the last batch repeated to keep ranks even."""
        gathered = ops.gather(data, caller="gather_for_metrics")
        loader = self._data_state.active
        if loader is not None and self._data_state.end_of_dataloader and loader.remainder:
            gathered = ops.truncate(gathered, loader.total_batch_size, loader.remainder)
        self._observers.notify_before("on_gather", gathered)
        return gathered

    def reduce(self, data: Any, reduction: str = "mean") -> Any:
        return ops.reduce(data, reduction)

    def pad_across_processes(self, data: Any, dim: int = 0, pad_index: int | float = 0,
                             pad_first: bool = False) -> Any:
        return ops.pad_across_processes(data, dim, pad_index, pad_first)

    def wait_for_everyone(self) -> None:
        self._process.barrier()

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self.is_main_process:
            builtins.print(*args, **kwargs)

    # -- saving --------------------------------------------------------------------------------
    def get_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The full state dict on CPU. A collective under ZeRO-3 and FSDP: call it on every rank."""
        state_dict = self._strategy.get_state_dict(model)
        self._observers.notify_before("on_state_dict", model, state_dict)
        return state_dict

    def save(self, obj: Any, path: str | Path) -> None:
        """On the main process only, written atomically: torch.save (a dict of tensors loads
        with `torch.load(path, weights_only=True)`), or safetensors for a `.safetensors` path."""
        if self.is_main_process:
            if str(path).endswith(".safetensors"):
                write_tensors(Path(path), obj)
            else:
                atomic_save(obj, path)

    def save_state(self, directory: str | Path) -> None:
        """Write the backend-neutral checkpoint (docs/checkpoint-format.md): full fp32 models,
        optimizer state by parameter name, schedulers, loss scaler, every rank's RNG and each
        dataloader's position; a collective, call it on every rank. Any strategy and world size
        can load_state it."""
        writer = CheckpointWriter(Path(directory), self.process_index, self.num_processes)
        # Before the plain barrier below, which would hang where a strategy that can detect a
        # call on some ranks only (DeepSpeed) raises CollectiveMisuseError instead.
        self._strategy.check_every_rank_arrives("accelerator.save_state(dir)")
        writer.begin()
        self.wait_for_everyone()
        self._strategy.save_state(writer, self._models, [o.optimizer for o in self._optimizers],
                                  [s.scheduler for s in self._schedulers])
        writer.progress([d.progress() for d in self._dataloaders])
        writer.rng()
        self.wait_for_everyone()
        problem: str | None = None
        try:
            writer.finish({"strategy": self._strategy.registered_name,
                           "mixed_precision": self.mixed_precision, "device": self.device.type},
                          {"models": len(self._models), "optimizers": len(self._optimizers),
                           "schedulers": len(self._schedulers), "dataloaders": len(self._dataloaders)})
        except CheckpointError as exc:  # e.g. a rank's files missing: every rank must hear of it, not hang
            problem = str(exc)
        problem = ops.broadcast_object(problem)
        if problem is not None:
            raise CheckpointError(problem)

    def load_state(self, directory: str | Path, allow_precision_change: bool = False) -> None:
        """Restore a save_state checkpoint written by any strategy at any world size (a
        collective). Dataloaders get their epoch back; a loop resuming mid-epoch continues with
        `skip_first_batches(dataloader)`. Refuses, with the reason, a checkpoint that is
        incomplete, newer, of another model or of another mixed precision (unless
        `allow_precision_change`)."""
        reader = CheckpointReader(Path(directory))
        reader.check_counts(models=len(self._models), optimizers=len(self._optimizers),
                            schedulers=len(self._schedulers), dataloaders=len(self._dataloaders))
        reader.check_precision(self.mixed_precision, allow_precision_change)
        # Dataloaders first: a position this run cannot resume at is refused before any weight changes.
        for index, (loader, entry) in enumerate(zip(self._dataloaders, reader.progress(), strict=True)):
            loader.restore(entry, index)
        self._strategy.check_every_rank_arrives("accelerator.load_state(dir)")
        self._strategy.load_state(reader, self._models, [o.optimizer for o in self._optimizers],
                                  [s.scheduler for s in self._schedulers])
        reader.restore_rng(self.process_index)

    def free_memory(self) -> None:
        """Release the backend's objects so the next Accelerator in this process starts clean
        (the process group is kept for reuse)."""
        self._strategy.teardown()
        self._models.clear()
        self._optimizers.clear()
        self._schedulers.clear()
        self._dataloaders.clear()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
