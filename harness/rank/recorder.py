"""What a rank records besides the user loop's own loss logging, in one place: an observer
(accelerate_core/observers.py) the rank's Accelerator tells of every prepare, backward and
optimizer step, so that the user loop (harness.rank.loop) stays the loop of
docs/the-user-loop.md.

Per optimizer step: the learning rates it stepped with, whether loss scaling skipped it, the loss
scale after it (GradScaler's or the DeepSpeed fp16 engine's). As evidence of what ran, read from
the objects that ran, never from the cell's request:
- what ran (backend, engine, sharding, world size, device): the implementation's adapter's
  what_ran() (the core's is accelerate_core/evidence), read after training, while the engine is
  still there;
- the dtypes the task's autocast site computed in and its gradient flowed back in
  (harness.rank.activations, hooks on the model);
- the collectives called inside backward and optimizer steps and the elements they moved, and,
  where gradients are whole on every rank (not ZeRO, not FSDP2), whether every rank held the same
  gradients before each optimizer step (harness.rank.collectives);
- whether a training micro-step drew random numbers (harness.rank.randomness);
- what `accelerator.unwrap_model(model)` hands back: the module the user built and prepared, which
  the user loop saves or inspects after training (a wrapper or a copy in its place changes no
  number the matrix compares).
The judge (harness.judge.evidence_check) checks the evidence against the cell before any number.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, ExitStack
from typing import Any

import torch
from torch import nn

from accelerate_core.observers import Observer
from harness.implementations.base import Adapter
from harness.judge.autocast_site import autocast_site
from harness.rank.activations import watching_activations, watching_evaluation
from harness.rank.collectives import CollectiveCounter, gradients_agree_across_ranks
from harness.rank.randomness import RandomDraws
from harness.rank.resume_point import RunSpan
from harness.tasks.base import Task


class RankRecorder(Observer):
    """One per cell. `close()` removes every hook and wrapper it installed; call it when the cell
    ends, however it ends (evidence() calls it too: evaluation is not training)."""

    def __init__(self, task: Task, span: RunSpan, adapter: Adapter) -> None:
        self._adapter = adapter  # reads what ran from the objects its implementation built
        self.lrs: list[list[float]] = []
        self.skipped_steps: list[int] = []
        self.loss_scales: list[float] = []
        self._span = span
        self._step = span.first_step  # the optimizer step (0-based) of the whole run
        self._site = autocast_site(task)  # probed with the RNG forked: no number changes
        self._seen: dict[str, Any] = {}
        self._counter = CollectiveCounter()
        self._agreed: list[bool] = []  # per optimizer step: did every rank hold the same gradients?
        self._checks_gradients = False
        self._draws: RandomDraws | None = None
        self._installed = ExitStack()
        self._model: nn.Module | None = None  # the prepared model, watched from on_prepare on

    # -- the observer hooks --------------------------------------------------------------------
    def on_prepare(self, accelerator: Any, prepared: Sequence[Any]) -> None:
        model = next((obj for obj in prepared if isinstance(obj, nn.Module)), None)
        if model is None or self._model is not None:
            return
        self._model = model
        # ZeRO owns its gradients; FSDP2's are this rank's shard (DTensors), different on every
        # rank by design: both are judged by the elements they reduce-scattered instead.
        self._checks_gradients = not self._adapter.owns_gradients(accelerator) and not _sharded(model)
        self._draws = draws = RandomDraws(accelerator.device)

        def micro_step_begins(module: nn.Module, _args: Any) -> None:
            if module.training:  # evaluation forwards are no training step
                draws.begin()

        # prepend: before a backend's own pre-forward hooks (FSDP2's all-gather), as the loop's
        # micro-step begins before it calls the model.
        handle = model.register_forward_pre_hook(micro_step_begins, prepend=True)
        self._installed.callback(handle.remove)
        self._installed.enter_context(watching_activations(model, self._seen, self._site))
        self._installed.enter_context(self._counter.installed())

    def before_backward(self, accelerator: Any, loss: torch.Tensor) -> None:
        self._counter.start()  # the collectives the backend's backward calls

    def after_backward(self, accelerator: Any, loss: torch.Tensor) -> None:
        self._counter.stop()

    def before_optimizer_step(self, accelerator: Any, optimizer: Any) -> None:
        if self._checks_gradients and self._model is not None:  # a collective: outside the counted window
            agreement = gradients_agree_across_ranks(self._model)
            if agreement is not None:
                self._agreed.append(agreement)
        self.lrs.append([group["lr"] for group in optimizer.param_groups])
        self._counter.start()

    def after_optimizer_step(self, accelerator: Any, optimizer: Any, skipped: bool) -> None:
        self._counter.stop()
        if skipped:  # fp16 loss scaling skipped this step
            self.skipped_steps.append(self._step)
        scale = self._adapter.loss_scale(accelerator)  # GradScaler's, or the DeepSpeed fp16 engine's
        if scale is not None:
            self.loss_scales.append(scale)
        self._step += 1
        if self._draws is not None:
            # The micro-step ends with its optimizer step: the next epoch's loader iterator (which
            # draws its base seed) is then outside every micro-step.
            self._draws.end()

    # -- after training ------------------------------------------------------------------------
    def evidence(self, accelerator: Any, model: nn.Module, built: nn.Module) -> dict[str, Any]:
        """Everything the judge reads of what ran; call it after training, before teardown (the
        engine must still be there). `model`: what prepare returned; `built`: the module the task
        built and the loop passed to prepare."""
        self.close()
        evidence = {**self._adapter.what_ran(accelerator, model), **self._seen}
        evidence["unwrap_model"] = unwrapped_evidence(accelerator.unwrap_model(model), built)
        draws = self._draws or RandomDraws(accelerator.device)
        evidence["random_draws"] = draws.evidence()
        # Collectives called inside backward and optimizer.step (the loss logging's are not counted).
        evidence["collectives"] = dict(sorted(self._counter.counts.items()))
        evidence["collective_elements"] = dict(sorted(self._counter.elements.items()))
        if self._agreed:
            evidence["gradients_agreed"] = {"steps": len(self._agreed), "agreed": sum(self._agreed)}
        if self._span.evidence() is not None:
            evidence["resume"] = self._span.evidence()
        return evidence

    def watching_evaluation(self, model: nn.Module, evidence: dict[str, Any]) -> AbstractContextManager[None]:
        """While the loop evaluates: the dtype evaluation computed in, into `evidence`
        (harness.rank.activations.watching_evaluation)."""
        return watching_evaluation(model, evidence, self._site)

    def close(self) -> None:
        self._installed.close()


def unwrapped_evidence(unwrapped: Any, built: nn.Module) -> dict[str, Any]:
    """What unwrap_model returned, against the module that was prepared: the same object on every
    backend (DDP's and DeepSpeed's wrappers hold it as `.module`, FSDP2 shards it in place)."""
    return {"is_the_prepared_module": unwrapped is built, "class": type(unwrapped).__name__}


def _sharded(model: nn.Module) -> bool:
    """Some parameter of the prepared model is a DTensor (FSDP2 sharded it)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())
