"""Where autocast acts in a task's model: the module whose output the half-precision evidence is
read from, found by running the model, not by a list of task names or layer types.

torch.autocast lowers some ops to the half dtype (linear, matmul, conv, ...) and leaves the rest
(elementwise arithmetic, reductions, losses) in fp32. A model built only from the latter computes
the same bits under bf16 autocast as in fp32: its half-precision cells cannot tell the precision
they asked for from fp32, and a half-precision golden of it is the fp32 golden again
(harness.golden.precision_visible refuses such a golden).

The probe: the model built from the task (fp32 weights, as the golden starts), a few training
samples, one forward in eval mode under bf16 autocast on the CPU, a forward hook on every module.
The site is the first module to finish its forward with a floating output in bfloat16: for the
built-in tasks the first Linear layer; for a model that computes in its own forward (`regression`,
`scalar`: `nn.functional.linear` with no submodule) the model itself, whose output is read through
its `logits`. None: autocast acts on no module of the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import default_collate

from harness.golden.global_rng import GLOBAL_RNG_LOCK
from harness.tasks.base import Task

PROBE_DTYPE = torch.bfloat16
_PROBE_SAMPLES = 2  # BatchNorm in train mode would need two; eval mode needs one, two cost nothing
_CACHE: dict[str, AutocastSite | None] = {}


@dataclass(frozen=True)
class AutocastSite:
    """The modules autocast acts on, in the order their forwards finished: the evidence reads the
    activation dtype from the first, and the gradient dtype from the first of them whose output
    needs a gradient (the first may be frozen: classifier's `embed`)."""

    modules: tuple[str, ...]  # qualified names in the model ("" for the model itself)
    class_name: str  # the first one's

    @property
    def module(self) -> str:
        return self.modules[0]

    def describe(self) -> str:
        """'embed (Linear)', 'the model itself (RegressionModel)' for the evidence."""
        where = self.module or "the model itself"
        return f"{where} ({self.class_name})"


def floating_output(output: Any) -> torch.Tensor | None:
    """A module's output as the tensor whose dtype says what it computed in: the tensor itself, or
    the `logits` of a task's output (TaskOutput, and objects shaped like it); None otherwise."""
    if isinstance(output, torch.Tensor):
        return output if output.is_floating_point() else None
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor) and logits.is_floating_point():
        return logits
    return None


def find_autocast_site(model: nn.Module, batch: dict[str, torch.Tensor]) -> AutocastSite | None:
    """The modules of `model` whose output comes out in bfloat16 when `model(**batch)` runs under
    CPU bf16 autocast, first finished first; None when none does. Runs in eval mode without
    gradients and puts the model's mode back."""
    found: dict[str, str] = {}  # name -> class name, in the order the forwards finished

    def hook_for(name: str) -> Any:
        def hook(module: nn.Module, _inputs: Any, output: Any) -> None:
            tensor = floating_output(output)
            if tensor is not None and tensor.dtype == PROBE_DTYPE:
                found.setdefault(name, type(module).__name__)
        return hook

    handles = [module.register_forward_hook(hook_for(name)) for name, module in model.named_modules()]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=PROBE_DTYPE):
            model(**batch)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    if not found:
        return None
    return AutocastSite(tuple(found), next(iter(found.values())))


def autocast_site(task: Task) -> AutocastSite | None:
    """The site of `task`'s model (cached per task definition). Raises what building or running
    the model raises: a caller that cannot probe decides what that means."""
    key = repr(task)  # a frozen dataclass: its class and every field
    if key not in _CACHE:
        with GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):  # building a model seeds the RNG
            model = task.build_model()
            dataset = task.train_dataset()
            batch = default_collate([dataset[i] for i in range(min(_PROBE_SAMPLES, len(dataset)))])
            _CACHE[key] = find_autocast_site(model, batch)
    return _CACHE[key]


def no_site_statement(model_class: str) -> str:
    """What the evidence says of a model autocast acts on nowhere."""
    return (f"none: no module of {model_class} computes in a half dtype under torch.autocast (only "
            "ops autocast leaves in fp32), so its half-precision runs compute what fp32 computes")
