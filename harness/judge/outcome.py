"""What a cell ended as: the types behind report.json (schema in docs/reading-the-report.md;
keep it stable)."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from harness.plan.cell import Cell, cell_from_fields

CELL_FIELDS = tuple(f.name for f in fields(Cell))


class Status(str, enum.Enum):
    PASSED = "passed"
    # ran and was judged wrong (a comparison left tolerance, the evidence disagreed, a
    # multi-process cell drew random numbers in training), or raised inside the cell (its
    # traceback in `detail`); `CellResult.failure` says which
    FAILED = "failed"
    SKIPPED = "skipped"  # cannot run here; `reason` says why
    XFAILED = "xfailed"  # failed, and matrix.toml declares that expected, with a reason
    XPASSED = "xpassed"  # declared an expected failure, yet passed: reported, not hidden
    ERROR = "error"  # the harness could not judge it (missing golden, bad record, broken launch)
    TIMEOUT = "timeout"  # did not finish within --timeout; stacks of every rank in `detail`
    CRASHED = "crashed"  # a rank died; the tail of its output in `detail`

    @property
    def is_unexpected_failure(self) -> bool:
        return self in (Status.FAILED, Status.XPASSED, Status.ERROR, Status.TIMEOUT, Status.CRASHED)


class Failure(str, enum.Enum):
    """How a `failed` cell failed: what an `[[expected]]` entry's `status` is matched against."""

    DIVERGENCE = "divergence"  # a number left the golden's tolerance
    EVIDENCE = "evidence"  # what ran is not what the cell asked for
    RANDOMNESS = "randomness"  # a multi-process cell of a task that draws random numbers in training
    EXCEPTION = "exception"  # training raised; the traceback of every rank that raised in `detail`


@dataclass
class Rerun:
    """A failing cell run again in a fresh launch, to confirm that its failure is its own and not
    left behind by a cell run before it in the same launch."""

    status: Status  # the rerun's own status (before any expected outcome)
    alone: bool  # it ran first in a fresh launch: nothing ran before it in its processes
    agreed: bool  # it failed the same way (same status and kind of failure)
    identical: bool  # its record is bit-identical to the first run's
    reason: str = ""  # the rerun's diagnosis
    launch_dir: str = ""

    def summary(self) -> str:
        where = "alone in a fresh launch" if self.alone else "in a fresh launch"
        if self.agreed and self.identical:
            return f"confirmed: rerun {where}, it failed the same way with a bit-identical record"
        if self.agreed:
            return (f"confirmed: rerun {where}, it failed the same way (its record is not bit-identical "
                    "to the first run's)")
        ended = "passed" if self.status == Status.PASSED else f"ended {self.status.value}"
        return (f"NOT confirmed: rerun {where}, it {ended} - a cell run before it in its "
                "launch changed its result (state leaking between cells?)")


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
    failure: Failure | None = None  # set when status is FAILED: how it failed
    rerun: Rerun | None = None  # a failing cell's confirmation in a fresh launch

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
        body["failure"] = self.failure.value if self.failure is not None else None
        if self.rerun is not None:
            body["rerun"]["status"] = self.rerun.status.value
        return {**data, **body}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellResult:
        data = dict(data)
        data.pop("id", None)
        cell = cell_from_fields(data)  # a ResumeCell's extra fields (source, resume_step) too
        data["status"] = Status(data["status"])
        data["comparisons"] = [Comparison(**c) for c in data.get("comparisons", [])]
        data["failure"] = Failure(data["failure"]) if data.get("failure") else None
        if data.get("rerun"):
            data["rerun"] = Rerun(**{**data["rerun"], "status": Status(data["rerun"]["status"])})
        return cls(cell=cell, **data)
