"""What a training script computed, recorded by the Accelerator when a tool asks for it.

Set `ACCELERATE_CORE_RECORD_DIR=DIR` in a script's environment (`python -m harness script` does)
and the script's own Accelerator records, with no change to the script:

- per-step losses: every loss given to `accelerator.backward(loss)`, averaged over processes
  (one extra all-reduce per backward, only while recording), and the learning rate of every
  param group of the prepared optimizers at that backward;
- gathered eval outputs: every result of `accelerator.gather(...)` / `gather_for_metrics(...)`,
  keyed by the line of the script that called it (`train.py:93`), concatenated in call order, so
  that one process with 5 eval batches and two with 3 record the same tensor;
- the final state dict: the last result of `accelerator.get_state_dict(model)` (consolidated,
  also under ZeRO-3), and what ran (strategy, world size, device, ZeRO stage, precision, loss
  scaling), read from the objects that ran by the core's one `what_ran()` (accelerate_core/evidence);
- the dtypes the model computed in: every floating dtype a module of the first prepared model
  output in the training forwards before the first backward (`computed_dtypes`), seen by forward
  hooks, so that a precision asked for and never applied shows (the precision object alone says
  what was asked).

The recorder is an observer (accelerate_core/observers.py) the Accelerator tells of each
prepare, backward, gather and get_state_dict, registered for the whole process: the script is
not changed.

The main process writes `DIR/record.pt` (torch.save of plain tensors, strings and numbers) when
the script's interpreter exits. Unset, nothing is recorded and nothing is paid. The core knows
nothing of who reads the file (it never imports the harness); the format is `RECORD_FORMAT`.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

import accelerate_core.observers as observers
import accelerate_core.ops as ops
from accelerate_core.evidence import precision_in_use, what_ran
from accelerate_core.optimizer import AcceleratedOptimizer

RECORD_DIR_VARIABLE = "ACCELERATE_CORE_RECORD_DIR"
RECORD_FILE = "record.pt"
RECORD_FORMAT = 1
_CORE_DIR = str(Path(__file__).resolve().parent)

_recorder: Recorder | None = None


class Recorder(observers.Observer):
    """One per process, registered process-wide (accelerate_core/observers.py): a script may make
    several Accelerators; the record is the process's."""

    def __init__(self, directory: Path, main_process: bool) -> None:
        self.directory = directory
        self.main_process = main_process
        self.losses: list[float] = []
        self.lrs: list[list[float]] = []
        self.gathered: dict[str, list[torch.Tensor]] = {}
        self.state_dict: dict[str, torch.Tensor] = {}
        self.evidence: dict[str, Any] = {}
        # What each Accelerator prepared, in order: its optimizers' learning rates are recorded
        # at every backward, its first model is what ran (weak: a freed Accelerator goes).
        self._prepared: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()
        self.computed_dtypes: set[str] = set()
        self._dtype_hooks: list[RemovableHandle] | None = None  # None: no model watched yet

    def on_prepare(self, accelerator: Any, prepared: Sequence[Any]) -> None:
        self._prepared.setdefault(accelerator, []).extend(prepared)
        model = next((obj for obj in prepared if isinstance(obj, nn.Module)), None)
        if model is not None and self._dtype_hooks is None:
            self._dtype_hooks = [module.register_forward_hook(self._computed_in)
                                 for module in model.modules()]

    def _computed_in(self, module: nn.Module, _inputs: Any, output: Any) -> None:
        if module.training and torch.is_grad_enabled():  # a training forward, not evaluation
            self.computed_dtypes.update(str(tensor.dtype).removeprefix("torch.")
                                        for _, tensor in _tensors(output) if tensor.is_floating_point())

    def before_backward(self, accelerator: Any, loss: torch.Tensor) -> None:
        if self._dtype_hooks:  # the first training forwards are seen: stop watching
            for handle in self._dtype_hooks:
                handle.remove()
            self._dtype_hooks = []
        prepared = self._prepared.get(accelerator, [])
        if not self.evidence:
            self.evidence = self._what_ran(accelerator, prepared)
        self.losses.append(float(ops.reduce(loss.detach().float(), "mean")))
        self.lrs.append([float(group["lr"]) for optimizer in prepared
                         if self._is_optimizer(optimizer) for group in optimizer.param_groups])

    def on_gather(self, accelerator: Any, result: Any) -> None:
        if not self.main_process:
            return
        site = self._call_site()
        for path, tensor in _tensors(result):
            self.gathered.setdefault(site + path, []).append(tensor.detach().cpu().clone())

    def on_state_dict(self, accelerator: Any, model: Any, state_dict: dict[str, torch.Tensor]) -> None:
        self.evidence = self.evidence or self._what_ran(accelerator, self._prepared.get(accelerator, []))
        if self.main_process:
            self.state_dict = {k: v.detach().cpu().clone() for k, v in state_dict.items()}

    @staticmethod
    def _what_ran(accelerator: Any, prepared: list[Any]) -> dict[str, Any]:
        """The record's evidence (its keys are RECORD_FORMAT's), from the one what_ran() of the
        core (accelerate_core/evidence) and the first model the Accelerator prepared."""
        model = next((obj for obj in prepared if isinstance(obj, nn.Module)), None)
        ran = what_ran(accelerator, model)
        engine = ran.get("deepspeed")
        return {
            "strategy": ran["strategy"],
            "world_size": ran["world_size"],
            "device": ran["device"],
            **precision_in_use(accelerator),
            "zero_stage": engine["zero_stage"] if engine is not None else None,
            "emulated": ran["emulated"],
        }

    # What a subclass recording another implementation's script changes (a tool's, e.g. the
    # harness's recorder of Hugging Face Accelerate scripts): which prepared objects are its
    # optimizers, and where the script's own frames begin.
    @staticmethod
    def _is_optimizer(prepared: Any) -> bool:
        return isinstance(prepared, AcceleratedOptimizer)

    @staticmethod
    def _call_site() -> str:
        return _call_site()

    def write(self) -> Path | None:
        """DIR/record.pt, atomically, on the main process (at exit; callable earlier too)."""
        if not self.main_process:
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / RECORD_FILE
        body = {
            "format": RECORD_FORMAT,
            "losses": torch.tensor(self.losses, dtype=torch.float64),
            "lrs": [torch.tensor(step, dtype=torch.float64) for step in self.lrs],
            "gathered": {site: _join(values) for site, values in self.gathered.items()},
            "state_dict": self.state_dict,
            "evidence": json.dumps({**self.evidence, "computed_dtypes": sorted(self.computed_dtypes)}
                                   if self.evidence else {}, sort_keys=True),
        }
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        torch.save(body, temporary)
        os.replace(temporary, path)
        return path


def register_from_environment(main_process: bool) -> Recorder | None:
    """With `ACCELERATE_CORE_RECORD_DIR` set: the process's recorder, made and registered as a
    process-wide observer on the first call (the first Accelerator's), written at exit. Unset:
    None, and nothing is watched."""
    global _recorder
    directory = os.environ.get(RECORD_DIR_VARIABLE)
    if not directory:
        return None
    if _recorder is None:
        _recorder = Recorder(Path(directory), main_process)
        observers.register(_recorder)
        atexit.register(_recorder.write)
    return _recorder


def _call_site(skipped: tuple[str, ...] = (_CORE_DIR,)) -> str:
    """`file.py:LINE` of the first frame outside the `skipped` folders (accelerate_core by default;
    a tool recording through wrappers of its own adds its folders): the script's gather call."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(skipped):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return "unknown"
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"


def _tensors(value: Any, path: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in a nested result, with its path (`/logits`, `/0`); "" for a bare tensor."""
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors(item, f"{path}/{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _tensors(item, f"{path}/{i}")
    elif is_dataclass(value) and not isinstance(value, type):
        for field in fields(value):
            yield from _tensors(getattr(value, field.name), f"{path}/{field.name}")


def _join(values: list[torch.Tensor]) -> torch.Tensor:
    """One tensor per call site: batches concatenated along dim 0 (scalars stacked)."""
    if all(v.dim() == 0 for v in values):
        return torch.stack(values)
    try:
        return torch.cat(values)
    except RuntimeError:  # trailing shapes differ (e.g. unpadded sequences): flatten each
        return torch.cat([v.flatten() for v in values])
