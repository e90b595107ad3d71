"""Judging a finished cell in the parent, while its launch goes on: a cell that finished
(whatever its numbers) left its processes usable; a divergence is confirmed afterwards in a
fresh launch (harness.run.confirm), which asks here which results need it."""

from __future__ import annotations

import time
from pathlib import Path

from harness.calibrate.exact_judge import judge_exactly
from harness.calibrate.semantics_judge import judge_semantics
from harness.judge.cell_verdict import judge_record
from harness.judge.outcome import Failure, Status
from harness.plan.cell import Cell
from harness.run.context import OnBroken, OnJudged, RunContext
from harness.run.record_compare import compare_dir, note_record_change


def judging(run: RunContext, by_id: dict[str, Cell], records_dir: Path | None = None,
            into: OnBroken | None = None) -> OnJudged:
    """The launch loop's `on_judged` for `by_id`'s cells: judge the record in `records_dir`
    (default: the run's records) and hand the result to `into` (default: the run's results)."""
    records = records_dir or run.records_dir
    other = compare_dir(run.options.compare_records)

    def judged(cell_id: str, seconds: float) -> bool:
        cell = by_id[cell_id]
        start = time.perf_counter()
        result = judge_record(
            cell,
            records / cell_id,
            duration_s=seconds,
            emulated=run.emulated.get(cell_id, False),
            env_name=run.options.env_name,
            matrix=run.matrix,
            compare_dir=other,
        )
        result = judge_semantics(result, records / cell_id, run.matrix.tolerances)
        if run.options.exact:
            result = judge_exactly(result, records / cell_id)
        if run.options.compare_records is not None:  # how the numbers moved against the other env
            note_record_change(run.options.compare_records, run.matrix, cell, result, records / cell_id)
        run.clock.add("judging", time.perf_counter() - start)
        (into or run.finish)(cell, result)
        return True

    return judged


def needs_confirmation(run: RunContext, cell: Cell) -> bool:
    """An unexpected failure judged from the numbers or evidence of a finished record. Not an
    exception, crash or hang (they ended their launch), nor randomness (decided by what the
    record says the task did, which a rerun would only repeat)."""
    result = run.results.get(cell.id)
    return (result is not None and result.status == Status.FAILED
            and result.failure in (Failure.DIVERGENCE, Failure.EVIDENCE))
