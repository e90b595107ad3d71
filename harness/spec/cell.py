"""Cells: the points of the matrix, read from matrix/matrix.toml.

A cell id is `{task}-{device}{processes}-{strategy}-{precision}` (README "The harness"), e.g.
`mlp-cpu2-zero3-bf16`. Task names use [a-z0-9_] only, so an id splits on '-' unambiguously.

The matrix file is read by harness.spec.matrix (`load_matrix`), selection by -k / -m is
harness.spec.selection (`select`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, cast, get_args

Device = Literal["cpu", "cuda"]
StrategyName = Literal["single", "ddp", "zero1", "zero2", "zero3"]
Precision = Literal["fp32", "fp16", "bf16"]

TASK_NAME = re.compile(r"^[a-z0-9_]+$")
DEVICES: tuple[Device, ...] = get_args(Device)
STRATEGIES: tuple[StrategyName, ...] = get_args(StrategyName)
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
CELL_ID = re.compile(
    r"^(?P<task>[a-z0-9_]+)-(?P<device>cpu|cuda)(?P<processes>[0-9]+)-"
    r"(?P<strategy>single|ddp|zero1|zero2|zero3)-(?P<precision>fp32|fp16|bf16)$"
)


@dataclass(frozen=True)
class Cell:
    task: str  # [a-z0-9_]+, a registered task
    device: Device
    processes: int
    strategy: StrategyName
    precision: Precision

    @property
    def id(self) -> str:
        return f"{self.task}-{self.device}{self.processes}-{self.strategy}-{self.precision}"

    @property
    def is_deepspeed(self) -> bool:
        return self.strategy.startswith("zero")

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
        if self.device == "cuda":
            marks.append("gpu" if self.processes == 1 else "multi_gpu")
        if self.precision in ("fp16", "bf16"):
            marks.append(self.precision)
        return tuple(marks)

    @classmethod
    def from_id(cls, cell_id: str) -> Cell:
        match = CELL_ID.match(cell_id)
        if match is None:
            raise ValueError(
                f"cell id {cell_id!r}: not of the form {{task}}-{{device}}{{processes}}-{{strategy}}-"
                f"{{precision}}. Valid: task [a-z0-9_]+, device {DEVICES}, strategy {STRATEGIES}, "
                f"precision {PRECISIONS}, e.g. 'mlp-cpu2-zero3-bf16'. Fix: list ids with "
                "`python -m harness list`"
            )
        return cls(
            task=match["task"],
            device=cast(Device, match["device"]),
            processes=int(match["processes"]),
            strategy=cast(StrategyName, match["strategy"]),
            precision=cast(Precision, match["precision"]),
        )
