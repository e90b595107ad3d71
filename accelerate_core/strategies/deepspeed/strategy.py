"""DeepSpeed ZeRO stages 1-3 behind the Strategy contract (registered as zero1, zero2, zero3).

The user's loop stays the plain one: it divides the loss by the accumulation steps itself and
calls optimizer.step() where it decides, including a short last accumulation at the end of an
epoch. So the engine runs with unmanaged accumulation (every step() is a boundary and nothing is
re-scaled), and backward passes `scale_wrt_gas=False`. deepspeed is imported in methods only.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn

from accelerate_core.deepspeed_plugin import DeepSpeedPlugin
from accelerate_core.deepspeed_support import (
    SUPPORTED_RANGE,
    UnsupportedDeepSpeedError,
    installed_deepspeed_version,
)
from accelerate_core.errors import ConflictingSettingsError, UnsupportedObjectError, explain
from accelerate_core.imports import require_deepspeed
from accelerate_core.precision.base import unwrap_forward
from accelerate_core.precision.deepspeed import DeepSpeedPrecision
from accelerate_core.strategies.base import Strategy
from accelerate_core.strategies.deepspeed import checkpoint as ds_checkpoint
from accelerate_core.strategies.deepspeed import state as ds_state
from accelerate_core.strategies.deepspeed.accel import (
    AcceleratorSwap,
    prepare_accelerator_choice,
    select_accelerator,
)
from accelerate_core.strategies.deepspeed.batchnorm import batchnorm_in_fp32
from accelerate_core.strategies.deepspeed.compat import (
    restore_functional_linear,
    zero3_hooks_miss_dataclass_outputs,
    zero_dim_safe_initialize,
)
from accelerate_core.strategies.deepspeed.config import CoreValues, build_config
from accelerate_core.strategies.deepspeed.noise import known_lines_once, show_known_warnings_once
from accelerate_core.strategies.deepspeed.outputs import expose_dataclass_outputs
from accelerate_core.sync_batchnorm import convert_sync_batchnorm

if TYPE_CHECKING:
    from accelerate_core.checkpoint import CheckpointReader, CheckpointWriter
    from accelerate_core.state import ProcessState


class DeepSpeedStrategy(Strategy):
    # One class for zero1/zero2/zero3: the registry's preset arrives as plugin.zero_stage.
    name: ClassVar[str] = "deepspeed"

    def __init__(
        self,
        process: ProcessState,
        precision: DeepSpeedPrecision,
        plugin: DeepSpeedPlugin | None = None,
        gradient_accumulation_steps: int = 1,
    ) -> None:
        require_deepspeed("a DeepSpeed strategy")
        super().__init__(process, precision)
        plugin = plugin or DeepSpeedPlugin()
        if plugin.gradient_accumulation_steps is None:
            plugin = dataclasses.replace(plugin, gradient_accumulation_steps=gradient_accumulation_steps)
        elif plugin.gradient_accumulation_steps != gradient_accumulation_steps:
            raise ConflictingSettingsError(
                explain(
                    f"DeepSpeedPlugin(gradient_accumulation_steps={plugin.gradient_accumulation_steps}) with "
                    f"Accelerator(gradient_accumulation_steps={gradient_accumulation_steps})",
                    "the two disagree and the user's loop divides its loss by one of them",
                    "the same number in both places, or only one of them",
                    "drop gradient_accumulation_steps from DeepSpeedPlugin",
                )
            )
        self.plugin = plugin
        self.precision: DeepSpeedPrecision = precision
        self.engine: Any = None
        self.config: dict[str, Any] = {}
        self._swap: AcceleratorSwap | None = None
        self._monitor: Any = None
        self._input_hook: Any = None
        self._output_hooks: list[Any] = []
        self._batchnorm_hooks: list[Any] = []
        self._clip_for_next_step = False
        self._group_names: list[list[str]] = []

    # -- environment ------------------------------------------------------------------------
    @property
    def root_device(self) -> torch.device:
        return self.process.device

    @property
    def emulated(self) -> bool:
        """True when fp16 runs through the opt-in CPU emulation (the harness labels the run)."""
        return self._swap is not None and self._swap.emulated

    @property
    def zero_stage(self) -> int:
        return self.plugin.zero_stage

    @property
    def registered_name(self) -> str:
        return f"zero{self.zero_stage}"

    def setup_environment(self) -> None:
        prepare_accelerator_choice(self.root_device)
        # Known, harmless messages of DeepSpeed's engine once per run, not per step and rank.
        main = self.process.is_main_process
        show_known_warnings_once(main)
        backend = "gloo" if self.root_device.type == "cpu" else "nccl"
        # Reuses the launch's group; a lone process gets a one-rank group on a free local port
        # (DeepSpeed wants RANK/WORLD_SIZE/MASTER_* even then, or it tries MPI discovery).
        self.process.init_process_group(backend)
        import deepspeed

        if self._swap is None:  # once per strategy: the swap remembers what teardown restores
            # Before DeepSpeed's comm layer starts, so it sees the accelerator of this device;
            # fp16 on a CPU without native fp16 is refused here, at Accelerator(), unless opted in.
            self._swap = select_accelerator(self.root_device, self.precision.mixed_precision,
                                            self.plugin.cpu_fp16_emulation)
        # Wraps the existing torch group in deepspeed.comm (creates one only if none exists).
        with known_lines_once(main):  # its comm op's "built successfully", from rank 0 only
            deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False)

    # -- preparing --------------------------------------------------------------------------
    def setup(
        self,
        models: Sequence[nn.Module],
        optimizers: Sequence[torch.optim.Optimizer],
        schedulers: Sequence[Any],
        micro_batch_size: int | None,
    ) -> tuple[list[nn.Module], list[Any], list[Any]]:
        if self.engine is not None:
            raise UnsupportedObjectError(
                explain(
                    "a second prepare() with a model, optimizer or scheduler under DeepSpeed",
                    "the DeepSpeed engine is built once, from the model and optimizer together",
                    "one prepare() call holding the model, its optimizer (and scheduler)",
                    "pass them all to a single accelerator.prepare(...) call",
                )
            )
        if len(models) != 1 or len(optimizers) > 1:
            raise UnsupportedObjectError(
                explain(
                    f"prepare() with {len(models)} model(s) and {len(optimizers)} optimizer(s) "
                    "under DeepSpeed",
                    "one DeepSpeed engine wraps exactly one model and at most one optimizer",
                    "one model, optionally with one optimizer, per Accelerator",
                    "prepare a single model (combine sub-models in one nn.Module)",
                )
            )
        if micro_batch_size is None:
            raise UnsupportedObjectError(
                explain(
                    "prepare() under DeepSpeed without a dataloader",
                    "DeepSpeed needs the per-process batch size for its config",
                    "a DataLoader prepared in the same prepare() call (or an earlier one)",
                    "pass the training dataloader to prepare() together with the model",
                )
            )
        self.setup_environment()
        self._monitor = ds_state.new_monitor_group()
        core = CoreValues(
            micro_batch_size=micro_batch_size,
            world_size=dist.get_world_size(),
            gradient_accumulation_steps=self.plugin.gradient_accumulation_steps or 1,
            precision_block=self.precision.config_block(),
            client_optimizer=bool(optimizers),
            client_scheduler=bool(schedulers),
        )
        self.config = build_config(self.plugin, core)
        if not optimizers and "optimizer" not in self.config:
            raise UnsupportedObjectError(
                explain(
                    "prepare() under DeepSpeed without an optimizer",
                    "the engine needs one for backward and step, and the DeepSpeed config names none",
                    "a torch optimizer passed to prepare(), or an 'optimizer' block in the config",
                    "pass your optimizer to accelerator.prepare(model, optimizer, dataloader)",
                )
            )

        import deepspeed

        model = models[0].to(self.root_device)
        # Group membership by name, before the engine swaps the groups' parameters for partitions.
        self._group_names = ds_checkpoint.group_names(model, optimizers[0] if optimizers else None)
        if self.sync_batchnorm and dist.get_world_size() > 1:
            # Before the engine exists: it flattens and partitions the parameters it is given
            # (the converted layers hold the same parameter objects, so the optimizer is intact).
            model = convert_sync_batchnorm(model)
        # The user's scheduler is NOT handed to the engine: the user's loop steps it itself
        # (skipping overflowed steps), and the engine would step it a second time.
        with zero_dim_safe_initialize(model):  # DeepSpeed's start-up broadcast and 0-dim params
            engine, optimizer, _, _ = deepspeed.initialize(
                model=model,
                optimizer=optimizers[0] if optimizers else None,
                model_parameters=None if optimizers else list(model.parameters()),
                config=self.config,
                dist_init_required=False,
            )
        self.engine = engine
        self.precision.attach(engine)
        if self.zero_stage == 3 and zero3_hooks_miss_dataclass_outputs():
            # ZeRO-3 cannot see into dataclass outputs when it hooks backward (outputs.py);
            # asked of the installed release, so this stays off where a release fixed it.
            self._output_hooks = expose_dataclass_outputs(engine.module)
        if self.precision.is_half:
            # Half weights with fp32 running statistics: BatchNorm as under torch.autocast.
            self._batchnorm_hooks = batchnorm_in_fp32(engine.module)
            # fp32 batches from an ordinary dataloader meet a half-precision model.
            self._input_hook = engine.module.register_forward_pre_hook(self._cast_inputs, with_kwargs=True)
            # fp32 buffers meet half activations as under torch.autocast (precision/deepspeed.py).
            self.precision.device_type = self.root_device.type
            self.precision.wrap_forward(engine)
        return [engine], [optimizer] if optimizers else [], list(schedulers)

    def _cast_inputs(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.precision.cast_inputs(args), self.precision.cast_inputs(kwargs)

    # -- training ---------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, model: nn.Module | None = None) -> None:
        # The loss is already divided by the accumulation steps in the user's loop.
        self._engine("backward").backward(loss, scale_wrt_gas=False)

    def optimizer_step(self, optimizer: Any) -> bool:
        engine = self._engine("optimizer.step()")
        engine.step()
        if self._clip_for_next_step:  # a clip_grad_norm_ call applies to one step, as in torch
            engine.optimizer.clip_grad = float(self.config.get("gradient_clipping", 0.0))
            self._clip_for_next_step = False
        # The engine's own overflow report (fp16 dynamic loss scaling skipped this step).
        overflow = bool(getattr(engine.optimizer, "overflow", False))
        if not overflow and not engine.was_step_applied():
            raise _step_not_applied()
        return overflow

    def zero_grad(self, optimizer: Any, set_to_none: bool = True) -> None:
        engine = self._engine("optimizer.zero_grad()")
        # The ZeRO optimizer owns the (partitioned) gradients; the module's .grad are views.
        if hasattr(engine.optimizer, "zero_grad"):
            engine.optimizer.zero_grad(set_to_none=set_to_none)
        engine.zero_grad()

    def clip_grad_norm_(
        self, parameters: Iterable[nn.Parameter], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """Clip in the coming optimizer.step(): the engine computes the global L2 norm of the
        (unscaled, reduced) gradients inside step() and scales them by max_norm / (norm + 1e-6)
        when above, exactly like torch.nn.utils.clip_grad_norm_. The norm does not exist yet at
        this call, so NaN is returned rather than a stale or partial value."""
        engine = self._engine("clip_grad_norm_")
        configured = float(self.config.get("gradient_clipping", 0.0))
        if norm_type != 2.0 or (configured and configured != float(max_norm)):
            raise ConflictingSettingsError(
                explain(
                    f"clip_grad_norm_(max_norm={max_norm}, norm_type={norm_type}) under DeepSpeed",
                    f"the engine clips the L2 norm inside optimizer.step(), configured with "
                    f"gradient_clipping={configured:g}, so this value would be ignored",
                    "norm_type=2 and the plugin's gradient_clipping (or none in the plugin)",
                    f"pass DeepSpeedPlugin(gradient_clipping={max_norm}) or drop the plugin's value",
                )
            )
        optimizer = engine.optimizer
        if not configured:
            if not hasattr(optimizer, "clip_grad"):
                raise UnsupportedObjectError(
                    explain(f"clip_grad_norm_ with the {type(optimizer).__name__} DeepSpeed optimizer",
                            "it has no per-step clipping setting", "ZeRO stages 1-3",
                            f"set DeepSpeedPlugin(gradient_clipping={max_norm}) instead")
                )
            optimizer.clip_grad = float(max_norm)  # for the next step only, see optimizer_step
            self._clip_for_next_step = True
        return torch.tensor(float("nan"))

    # -- state ------------------------------------------------------------------------------
    def unwrap_model(self, model: nn.Module) -> nn.Module:
        return getattr(model, "module", model) if model is self.engine else model

    def get_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        engine = self._engine("get_state_dict")
        ds_state.check_every_rank_arrives("accelerator.get_state_dict(model)", self._monitor,
                                          self.plugin.collective_timeout_s)
        return ds_state.consolidated_state_dict(engine)

    def check_every_rank_arrives(self, what: str) -> None:
        """CollectiveMisuseError (not a hang) when `what` runs on some ranks only; Accelerator
        calls it before its own barriers. Nothing to check before prepare() made the group."""
        if self._monitor is not None:
            ds_state.check_every_rank_arrives(what, self._monitor, self.plugin.collective_timeout_s)

    def save_state(self, writer: CheckpointWriter, models: Sequence[nn.Module], optimizers: Sequence[Any],
                   schedulers: Sequence[Any]) -> None:
        """The neutral checkpoint: every rank gathers full values (collectives), the main
        process writes them."""
        engine = self._engine("save_state")
        self.check_every_rank_arrives("accelerator.save_state(dir)")  # also when called directly
        writer.model(0, ds_state.consolidated_state_dict(engine))
        if optimizers:
            writer.optimizer(0, ds_checkpoint.export_optimizer(engine, self._group_names, "optimizer 0"))
        for i, scheduler in enumerate(schedulers):
            writer.scheduler(i, scheduler)
        writer.precision(self.precision.mixed_precision, ds_checkpoint.loss_scaler_state(engine))

    def load_state(self, reader: CheckpointReader, models: Sequence[nn.Module], optimizers: Sequence[Any],
                   schedulers: Sequence[Any]) -> None:
        """Any strategy's checkpoint, scattered into this engine's partitions."""
        engine = self._engine("load_state")
        self.check_every_rank_arrives("accelerator.load_state(dir)")
        ds_checkpoint.import_model(engine, reader.model(0, ds_checkpoint.full_shapes(engine.module)))
        if optimizers:
            ds_checkpoint.import_optimizer(engine, self._group_names, reader.optimizer(0), "optimizer 0")
        for i, scheduler in enumerate(schedulers):
            scheduler.load_state_dict(reader.scheduler(i))
        ds_checkpoint.load_loss_scaler(engine, reader.precision().get("loss_scaler"))

    def teardown(self) -> None:
        if self._input_hook is not None:
            self._input_hook.remove()
            self._input_hook = None
        for handle in [*self._output_hooks, *self._batchnorm_hooks]:
            handle.remove()
        self._output_hooks = []
        self._batchnorm_hooks = []
        if self.engine is not None:
            unwrap_forward(self.engine)
            self.engine.destroy()
            self.engine = None
            self.precision.attach(None)
        restore_functional_linear()
        ds_state.destroy_monitor_group(self._monitor)
        self._monitor = None
        if self._swap is not None:
            self._swap.restore()
            # `emulated` stays readable after teardown so the harness can label the run.
            self._swap = AcceleratorSwap(previous=None, emulated=self._swap.emulated)
        gc.collect()

    def _engine(self, what: str) -> Any:
        if self.engine is None:
            raise UnsupportedObjectError(
                explain(f"{what} under DeepSpeed", "no model was prepared (or the Accelerator was torn down)",
                        "calls after accelerator.prepare(model, optimizer, dataloader)",
                        "call accelerator.prepare(...) first")
            )
        return self.engine


def _step_not_applied() -> UnsupportedDeepSpeedError:
    """Every optimizer.step() of the user's loop is an accumulation boundary (the config sets
    managed_gradient_accumulation=False), so an engine that skips one without an fp16 overflow
    is counting micro-steps itself: releases before 0.19.4 have no such setting, ignore it, and
    apply only every gradient_accumulation_steps-th step (measured on 0.16.9 and 0.19.0). Training
    on would be silently wrong; reachable past the version check only by its override."""
    version = installed_deepspeed_version() or "unknown"
    return UnsupportedDeepSpeedError(explain(
        f"optimizer.step() under deepspeed {version}",
        "the engine did not apply the step and reported no fp16 overflow: it counts micro-steps "
        "itself instead of taking the loop's optimizer.step() as the accumulation boundary, as "
        "releases before 0.19.4 do (they do not know managed_gradient_accumulation)",
        f"a DeepSpeed release in {SUPPORTED_RANGE}",
        f'pip install "deepspeed{SUPPORTED_RANGE}"'))

