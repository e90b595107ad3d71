"""Cells: the points of the matrix, read from matrix/matrix.toml.

A cell id is `{task}-{device}{processes}-{strategy}-{precision}` (README "The harness"), e.g.
`mlp-cpu2-zero3-bf16`. Task names use [a-z0-9_] only, so an id splits on '-' unambiguously.
A cell of another implementation than the project's own core (the `implementation` axis,
harness.implementations; docs/implementations.md) ends in `-{implementation}`, e.g.
`mlp-cpu2-zero3-bf16-accelerate`; the core's cells keep the ids they always had.

A resume cell (`ResumeCell`, docs/resume.md) is the source cell's id, ':', and the destination
cell's id without its task, e.g. `classifier-cpu2-zero3-fp32:cpu1-single-fp32`; or
`{task}-golden-{precision}:...` when the checkpoint is the plain-PyTorch reference's. ':' rather
than '>' because pytest's -k grammar accepts ':' inside a name and refuses '>'.

The matrix file is read by harness.plan.matrix (`load_matrix`), selection by -k / -m is
harness.plan.selection (`select`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any, Literal, cast, get_args

Device = Literal["cpu", "cuda"]
StrategyName = Literal["single", "ddp", "zero1", "zero2", "zero3", "fsdp"]
Precision = Literal["fp32", "fp16", "bf16"]

TASK_NAME = re.compile(r"^[a-z0-9_]+$")
CORE = "core"  # the implementation under test by default: accelerate_core
DEVICES: tuple[Device, ...] = get_args(Device)
STRATEGIES: tuple[StrategyName, ...] = get_args(StrategyName)
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
CELL_ID = re.compile(
    r"^(?P<task>[a-z0-9_]+)-(?P<device>cpu|cuda)(?P<processes>[0-9]+)-"
    r"(?P<strategy>single|ddp|zero1|zero2|zero3|fsdp)-(?P<precision>fp32|fp16|bf16)"
    r"(?:-(?P<implementation>[a-z0-9_]+))?$"
)


@dataclass(frozen=True)
class Cell:
    task: str  # [a-z0-9_]+, a registered task
    device: Device
    processes: int
    strategy: StrategyName
    precision: Precision
    # Which Accelerator runs the user loop (harness.implementations); "core" is absent from ids.
    implementation: str = CORE

    @property
    def id(self) -> str:
        base = f"{self.task}-{self.device}{self.processes}-{self.strategy}-{self.precision}"
        return base if self.implementation == CORE else f"{base}-{self.implementation}"

    @property
    def is_deepspeed(self) -> bool:
        return self.strategy.startswith("zero")

    @property
    def is_fsdp(self) -> bool:
        """FSDP2 (torch's fully_shard): part of torch, so it needs no deepspeed."""
        return self.strategy == "fsdp"

    @property
    def zero_stage(self) -> int | None:
        return int(self.strategy[4:]) if self.is_deepspeed else None

    @property
    def mixed_precision(self) -> str:
        """The Accelerator's `mixed_precision` value for this cell."""
        return "no" if self.precision == "fp32" else self.precision

    @property
    def markers(self) -> tuple[str, ...]:
        """pytest markers from the cell's axes (registered in pyproject.toml)."""
        marks = ["matrix"]
        if self.is_deepspeed:
            marks.append("deepspeed")
        if self.strategy == "ddp":
            marks.append("ddp")
        if self.is_fsdp:
            marks.append("fsdp")
        if self.device == "cuda":
            marks.append("gpu" if self.processes == 1 else "multi_gpu")
        if self.precision in ("fp16", "bf16"):
            marks.append(self.precision)
        return tuple(marks)

    @classmethod
    def from_id(cls, cell_id: str) -> Cell:
        if RESUME_SEPARATOR in cell_id:
            return ResumeCell.from_resume_id(cell_id)
        match = CELL_ID.match(cell_id)
        if match is None:
            raise ValueError(
                f"cell id {cell_id!r}: not of the form {{task}}-{{device}}{{processes}}-{{strategy}}-"
                f"{{precision}}[-{{implementation}}]. Valid: task [a-z0-9_]+, device {DEVICES}, strategy "
                f"{STRATEGIES}, precision {PRECISIONS}, e.g. 'mlp-cpu2-zero3-bf16' or "
                "'mlp-cpu2-zero3-bf16-accelerate'. Fix: list ids with `python -m harness list`"
            )
        return cls(
            task=match["task"],
            device=cast(Device, match["device"]),
            processes=int(match["processes"]),
            strategy=cast(StrategyName, match["strategy"]),
            precision=cast(Precision, match["precision"]),
            implementation=match["implementation"] or CORE,
        )


RESUME_SEPARATOR = ":"  # source:destination; pytest's -k grammar allows ':' in a name, not '>'
GOLDEN_SOURCE = "golden"  # the source of a resume cell whose checkpoint the reference wrote
SHAPE_STRATEGY = re.compile(
    r"^(?P<device>cpu|cuda)(?P<processes>[0-9]+)-(?P<strategy>single|ddp|zero1|zero2|zero3|fsdp)$")


@dataclass(frozen=True)
class ResumeCell(Cell):
    """A run saved after `resume_step` optimizer steps by a source and finished from that
    checkpoint by a destination. The inherited axes are the DESTINATION's (its launch shape, its
    tolerance, the evidence it must show); `source` is the source's `{device}{processes}-{strategy}`,
    or "golden" for the checkpoint the plain-PyTorch reference writes. Both ends share the
    precision (it appears on both sides of the id so that each side reads as a cell id)."""

    source: str = GOLDEN_SOURCE
    # Optimizer steps the source takes before it saves (matrix.toml [resume]). Not in the id, so
    # not compared: a cell is what its id names, the step is the matrix's setting for its task.
    resume_step: int = field(default=1, compare=False)

    @property
    def id(self) -> str:
        destination = self.destination_cell.id[len(self.task) + 1:]
        return f"{self.task}-{self.source}-{self.precision}{RESUME_SEPARATOR}{destination}"

    @property
    def destination_cell(self) -> Cell:
        return Cell(self.task, self.device, self.processes, self.strategy, self.precision)

    @property
    def source_cell(self) -> Cell | None:
        """The cell that trains the first `resume_step` steps and saves; None for the golden."""
        if self.source == GOLDEN_SOURCE:
            return None
        match = SHAPE_STRATEGY.match(self.source)
        if match is None:  # __post_init__ refuses this; kept for the type checker
            raise ValueError(f"resume source {self.source!r}")
        return Cell(self.task, cast(Device, match["device"]), int(match["processes"]),
                    cast(StrategyName, match["strategy"]), self.precision)

    def __post_init__(self) -> None:
        if self.source != GOLDEN_SOURCE and not SHAPE_STRATEGY.match(self.source):
            raise ValueError(
                f"resume source {self.source!r}: not '{GOLDEN_SOURCE}' nor "
                "{device}{processes}-{strategy}. "
                f"Valid: e.g. 'cpu2-zero3', 'cpu1-single', '{GOLDEN_SOURCE}'. Fix: correct the source"
            )
        if self.resume_step < 1:
            raise ValueError(f"resume step {self.resume_step}: a source must take at least one "
                             "optimizer step before it saves. Fix: a step of 1 or more")

    @property
    def markers(self) -> tuple[str, ...]:
        """The destination's markers, the source's (a zero3 source makes it a deepspeed cell),
        and `resume`."""
        marks = list(super().markers)
        source = self.source_cell
        for mark in source.markers if source is not None else ():
            if mark not in marks:
                marks.append(mark)
        return (*marks, "resume")

    @property
    def checkpoint_name(self) -> str:
        """The checkpoint (and source record) this cell resumes from: a SourceCell's id, or the
        reference's `{task}-golden-{precision}@step{k}`."""
        return f"{self.task}-{self.source}-{self.precision}@step{self.resume_step}"

    @classmethod
    def from_resume_id(cls, cell_id: str, resume_step: int = 1) -> ResumeCell:
        source_text, _, destination_text = cell_id.partition(RESUME_SEPARATOR)
        task, _, rest = source_text.partition("-")
        valid = (f"{{task}}-{{device}}{{processes}}-{{strategy}}-{{precision}}{RESUME_SEPARATOR}"
                 f"{{device}}{{processes}}-{{strategy}}-{{precision}}, the source may be "
                 f"'{{task}}-{GOLDEN_SOURCE}-{{precision}}', e.g. "
                 f"'classifier-cpu2-zero3-fp32{RESUME_SEPARATOR}"
                 f"cpu1-single-fp32'")
        source, _, precision = rest.rpartition("-")
        try:
            destination = Cell.from_id(f"{task}-{destination_text}")
        except ValueError:
            destination = None
        if (destination is None or RESUME_SEPARATOR in destination_text or precision != destination.precision
                or destination.implementation != CORE
                or not (source == GOLDEN_SOURCE or SHAPE_STRATEGY.match(source))):
            raise ValueError(
                f"resume cell id {cell_id!r}: not of the form {valid}; both sides name the same "
                "precision. Fix: list ids with `python -m harness list -k resume`"
            )
        return cls(destination.task, destination.device, destination.processes, destination.strategy,
                   destination.precision, source=source, resume_step=resume_step)


@dataclass(frozen=True)
class SourceCell(Cell):
    """The first `save_after` optimizer steps of a cell's run, saved with save_state: the half of
    resume cells that saves. One per (cell, step), shared by every destination resuming from it;
    never a cell of the report, only of a launch (its id names its record and checkpoint)."""

    save_after: int = 1

    @property
    def id(self) -> str:
        return f"{super().id}@step{self.save_after}"


def cell_from_fields(data: dict[str, Any]) -> Cell:
    """The Cell (or ResumeCell) whose fields are in `data` (a plan entry, report.json's cell
    entry); the fields are taken out of `data`, the rest is left to the caller."""
    kind: type[Cell] = ResumeCell if "source" in data else SourceCell if "save_after" in data else Cell
    return kind(**{f.name: data.pop(f.name) for f in fields(kind) if f.name in data})
