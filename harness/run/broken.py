"""The result of the cell that ended its launch: it raised (failed, with the traceback, as pytest
reports an exception in a test), crashed or hung; its reason is one sentence saying which, with
the evidence in its detail."""

from __future__ import annotations

from pathlib import Path

from harness.judge.cell_verdict import new_result
from harness.judge.outcome import CellResult, Failure, Status
from harness.plan.cell import Cell
from harness.run.torchrun_launch import LaunchOutcome


def broken_result(cell: Cell, outcome: LaunchOutcome, launch_dir: Path, timeout_s: float,
                  emulated: bool) -> CellResult:
    first = outcome.detail.strip().splitlines()[0] if outcome.detail.strip() else ""
    status, failure = Status.FAILED, None
    if outcome.broken_status == "crashed":
        status, reason = Status.CRASHED, f"{first}; tail of its output in detail"
    elif outcome.broken_status == "timeout":
        status = Status.TIMEOUT
        reason = (f"no result within --timeout {timeout_s:g} s; "
                  "Python stacks of every rank in detail")
    else:
        failure = Failure.EXCEPTION
        reason = f"exception in training: {_last_line(outcome.detail)} (traceback in detail)"
    return new_result(
        cell,
        status,
        reason,
        detail=outcome.detail,
        emulated=emulated,
        duration_s=round(outcome.broken_seconds, 3),
        extra={"launch_dir": str(launch_dir)},
        failure=failure,
    )


def _last_line(text: str) -> str:
    """The exception's own line: the last of the traceback, past the ranks' separators."""
    lines = [line for line in text.strip().splitlines() if line.strip() and not line.startswith("---")]
    return lines[-1].strip() if lines else "(no message)"
