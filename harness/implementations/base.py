"""The interface an implementation of the Accelerator API offers the harness: build the
accelerator a cell asks for, read what ran from the objects it built, free it.

The rank loop (harness.rank.loop) is the user loop of docs/the-user-loop.md, written once against
the API the user's script uses (docs/the-user-loop.md) (`prepare`, `backward`, `clip_grad_norm_`, `reduce`,
`gather_for_metrics`, `get_state_dict`, `wait_for_everyone`, `optimizer.is_overflow`). An adapter
hands it an accelerator that answers that API, and tells the rank's recorder
(harness.rank.recorder) of every prepare, backward and optimizer step through the core's observer
interface (accelerate_core/observers.py): natively for the core, through wrappers it installs for
an implementation that has no such interface. docs/implementations.md writes this down for a
third implementation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from accelerate_core.observers import Observer
from harness.tasks.base import Task


@dataclass(frozen=True)
class CellSettings:
    """What a cell asks of the accelerator (its axes, resolved for one rank)."""

    precision: str  # "fp32" | "fp16" | "bf16"
    cpu: bool
    zero_stage: int | None  # a DeepSpeed ZeRO stage, None for no DeepSpeed
    fsdp: bool  # FSDP2
    cpu_fp16_emulation: bool  # DeepSpeed fp16 on a CPU without native fp16 (the labelled emulation)

    @property
    def mixed_precision(self) -> str:
        return "no" if self.precision == "fp32" else self.precision


class Adapter(ABC):
    """One implementation of the Accelerator API. An instance serves every cell of a process."""

    name: str
    # Whether its gather rebuilds a plain dataclass (the core's does; Hugging Face Accelerate's
    # walks mappings, lists and tuples only, so a dataclass output that is not also a mapping, as
    # a transformers ModelOutput is, raises TypeError there): the loop gathers its output object
    # whole only where this holds.
    gathers_dataclasses: bool = True

    @abstractmethod
    def build(self, task: Task, settings: CellSettings, observers: Sequence[Observer]) -> Any:
        """The accelerator for this cell, with `observers` told of what it does."""

    @abstractmethod
    def what_ran(self, accelerator: Any, model: nn.Module) -> dict[str, Any]:
        """The evidence of what ran (the keys of accelerate_core.evidence.what_ran), read from the
        objects the implementation built: never from `settings`."""

    @abstractmethod
    def owns_gradients(self, accelerator: Any) -> bool:
        """An engine (DeepSpeed) holds the gradients: the ranks' whole-gradient agreement cannot
        be read from the model's parameters."""

    @abstractmethod
    def loss_scale(self, accelerator: Any) -> float | None:
        """The loss scale in force after a step (GradScaler's or an engine's); None without one."""

    @abstractmethod
    def ran_as(self, accelerator: Any) -> tuple[str, bool]:
        """(the strategy name the implementation says it ran, whether it was an emulation): the
        record's fingerprint."""

    @abstractmethod
    def free(self, accelerator: Any) -> None:
        """Release the cell's objects and process-wide state, so that the next cell in this
        process starts as it would alone (the process group stays: cells share a launch)."""
