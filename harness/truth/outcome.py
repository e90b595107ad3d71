"""What a cell ended as: the types behind report.json (schema in docs/reading-the-report.md;
keep it stable)."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from harness.spec.cell import Cell

CELL_FIELDS = tuple(f.name for f in fields(Cell))


class Status(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"  # ran, and a comparison left tolerance (unexpectedly)
    SKIPPED = "skipped"  # cannot run here; `reason` says why
    XFAILED = "xfailed"  # failed, and matrix.toml declares that expected, with a reason
    XPASSED = "xpassed"  # declared an expected failure, yet passed: reported, not hidden
    ERROR = "error"  # the harness could not judge it (missing golden, bad record, setup error)
    TIMEOUT = "timeout"  # did not finish within --timeout; stacks of every rank in `detail`
    CRASHED = "crashed"  # a rank died; the tail of its output in `detail`

    @property
    def is_unexpected_failure(self) -> bool:
        return self in (Status.FAILED, Status.XPASSED, Status.ERROR, Status.TIMEOUT, Status.CRASHED)


@dataclass
class Comparison:
    """One quantity of a record against its golden (losses, lrs, eval outputs, a tensor)."""

    quantity: str  # e.g. "losses", "lrs", "eval/logits", "state_dict/lm.head.weight"
    ok: bool
    max_abs_diff: float
    max_rel_diff: float
    atol: float
    rtol: float
    # Where it first left tolerance, e.g. "step 7" or "index (3, 1)"; None when ok.
    first_divergence: str | None = None
    # Fraction of the tolerance used at the worst element (1.0 = exactly at the limit).
    tolerance_used: float = 0.0
    note: str | None = None  # e.g. "NaN first at step 4"


@dataclass
class CellResult:
    cell: Cell  # the cell itself, whole: its id and axes are derived, never stored twice
    status: Status
    reason: str = ""  # one sentence: skip reason, diagnosis, expected-failure reason
    duration_s: float = 0.0
    comparisons: list[Comparison] = field(default_factory=list)
    detail: str = ""  # long text: rank output tail, stack dumps, traceback
    emulated: bool = False  # ran through a labelled emulation (DeepSpeed fp16 on CPU)
    environment: str = ""  # name of the environment it ran in (e.g. "deepspeed", "nodeepspeed")
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.cell.id

    @property
    def task(self) -> str:
        return self.cell.task

    @property
    def device(self) -> str:
        return self.cell.device

    @property
    def strategy(self) -> str:
        return self.cell.strategy

    @property
    def processes(self) -> int:
        return self.cell.processes

    @property
    def precision(self) -> str:
        return self.cell.precision

    def to_json(self) -> dict[str, Any]:
        """report.json's cell entry: the cell's id and axes first, as the schema has them."""
        data: dict[str, Any] = {"id": self.id, **asdict(self.cell)}
        body = asdict(self)
        del body["cell"]
        body["status"] = self.status.value
        return {**data, **body}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellResult:
        data = dict(data)
        data.pop("id", None)
        cell = Cell(**{name: data.pop(name) for name in CELL_FIELDS})
        data["status"] = Status(data["status"])
        data["comparisons"] = [Comparison(**c) for c in data.get("comparisons", [])]
        return cls(cell=cell, **data)
