"""Run cells: skip what cannot run here, group the rest by launch shape, launch, judge.

Public API (helper code, pytest items and the CLI rely on it; keep exact):
  RunOptions                                  what a run needs (dataclass below)
  run_cells(cells, options, progress=None) -> list[CellResult]
      one result for EVERY requested cell, in the order given; a cell's failure never raises.
      Ctrl-C / SIGTERM raise RunInterrupted carrying the results finished so far.
  launch_group_key(cell) -> str
      cells with the same key share a launch ("cpu2"): pytest-xdist groups items by it.

Speed comes from sharing: a launch costs seconds of start-up (imports, process group,
DeepSpeed's one-off op build and first initialize), a cell inside a running launch about a
second. So every cell of one shape runs in one launch, and start-up is measured apart
(`startup.json`, the report's start-up time), never inside a cell's clock or --timeout.

Failures: a cell that raised, crashed or hung may have left its processes unusable, so it ends
its launch (its processes exit or are stopped) and the cells not yet run go on in a fresh one.
A cell judged wrong (its record diverged from the golden) finished normally: the launch goes on.
Each such unexpected failure is then confirmed in a fresh launch (harness.run.confirm) and the
report says whether the rerun agreed: a result that changes when the cells before it change was
left behind by them, not made by the cell.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from harness.run.confirm import confirm_failures
from harness.run.deepspeed_ops import ensure_deepspeed_ops
from harness.run.launch import LaunchOutcome, launch_env, run_launch
from harness.run.processes import cleanup_all
from harness.run.profile import RunClock
from harness.run.resume import run_resume
from harness.run.startup import write_startup
from harness.spec.availability import Host, check, probe_host
from harness.spec.cell import Cell, ResumeCell
from harness.spec.matrix import Matrix, load_matrix
from harness.truth.judge import apply_expected, judge_record, new_result
from harness.truth.outcome import CellResult, Failure, Status


class ProgressLike(Protocol):
    def cell_started(self, cell_id: str) -> None: ...
    def cell_finished(self, result: CellResult) -> None: ...


@dataclass
class RunOptions:
    report_dir: Path
    timeout_s: float = 120.0  # per cell, from its start; start-up of a launch has its own grace
    isolate: bool = False  # one launch per cell (slow; for comparison and debugging)
    env_name: str = ""  # the environment of matrix.toml this run is in (reports, expectations)
    matrix_path: Path | None = None
    compare_records: Path | None = None  # another environment's report dir: cross-check records
    allow_cpu_fp16_emulation: bool = True
    # CPU launch groups run at the same time, up to this many (0: 2 on a machine with 2+ cores).
    # A 1-process group beside a 2-process one uses the core the first would leave idle; GPU
    # groups always run one after another (they would share devices).
    parallel_launches: int = 0
    host: Host | None = None  # tests inject a host; None = probe this machine
    matrix: Matrix | None = None  # already loaded (saves a re-read); None = load matrix_path


class RunInterrupted(Exception):
    """SIGINT/SIGTERM during a run: every launch was stopped; `results` holds the finished cells."""

    def __init__(self, results: list[CellResult], signal_name: str = "SIGINT") -> None:
        super().__init__(f"run interrupted by {signal_name}; {len(results)} cell(s) finished")
        self.results = results
        self.signal_name = signal_name


def launch_group_key(cell: Cell) -> str:
    """Cells with the same key run in one launch: same device kind and number of processes."""
    return f"{cell.device}{cell.processes}"


@dataclass
class _Run:
    options: RunOptions
    matrix: Matrix
    progress: ProgressLike | None
    emulated: dict[str, bool] = field(default_factory=dict)
    results: dict[str, CellResult] = field(default_factory=dict)
    stopping: bool = False  # set on SIGINT/SIGTERM: launch threads stop, late results are dropped
    launches: list[dict[str, object]] = field(default_factory=list)  # start-up time of each
    ops_lock: threading.Lock = field(default_factory=threading.Lock)
    ops_done: bool = False  # DeepSpeed's CPU op is built (or its build was tried) in this run
    clock: RunClock = field(default_factory=RunClock)  # where the run's time went (--profile)

    def ensure_deepspeed_ops(self, group: list[Cell]) -> None:
        """Before the first launch of DeepSpeed CPU cells: build DeepSpeed's comm op, once."""
        if not any(c.is_deepspeed and c.device == "cpu" for c in group):
            return
        with self.ops_lock:  # the other launch threads wait here rather than build it twice
            if not self.ops_done:
                self.launches.append(ensure_deepspeed_ops(launch_env(group[0])))
                self.ops_done = True

    @property
    def records_dir(self) -> Path:
        return self.options.report_dir / "records"

    def finish(self, cell: Cell, result: CellResult) -> None:
        if self.stopping:  # a cell cut short by the interrupt is not a result: --resume reruns it
            return
        expected = self.matrix.expected_outcome(cell, self.options.env_name)
        result.environment = self.options.env_name
        self.results[cell.id] = apply_expected(result, expected)
        if self.progress is not None:
            self.progress.cell_finished(self.results[cell.id])


def run_cells(
    cells: list[Cell], options: RunOptions, progress: ProgressLike | None = None
) -> list[CellResult]:
    matrix = options.matrix or load_matrix(options.matrix_path)
    run = _Run(options, matrix, progress)
    host = options.host or probe_host(options.allow_cpu_fp16_emulation)
    by_id = {cell.id: cell for cell in cells}
    groups: dict[str, list[Cell]] = {}
    resume_cells: list[ResumeCell] = []
    for cell in by_id.values():
        unknown = _unknown_task(cell)
        if unknown:  # the harness cannot build it: not judged, and no launch to pay for
            run.finish(cell, new_result(cell, Status.ERROR, unknown))
            continue
        verdict = check(cell, host)
        if not verdict.runnable:
            run.finish(
                cell, new_result(cell, Status.SKIPPED, verdict.reason, extra={"reason_code": verdict.code})
            )
            continue
        run.emulated[cell.id] = verdict.emulated
        if isinstance(cell, ResumeCell):  # a source launch, then a destination one: harness.run.resume
            resume_cells.append(cell)
            continue
        groups.setdefault(launch_group_key(cell), []).append(cell)
    # Declared failures last: a declared exception or crash ends its launch.
    declared = {c.id for c in by_id.values() if matrix.expected_outcome(c, options.env_name) is not None}
    for key, group in groups.items():
        groups[key] = sorted(group, key=lambda c: c.id in declared)
    options.report_dir.mkdir(parents=True, exist_ok=True)
    cpu_groups = [(k, g) for k, g in groups.items() if g[0].device == "cpu"]
    other_groups = [(k, g) for k, g in groups.items() if g[0].device != "cpu"]
    parallel = options.parallel_launches or (2 if host.cpu_cores >= 2 else 1)
    try:
        with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="launch") as pool:
            futures = [pool.submit(_run_group, run, key, group) for key, group in cpu_groups]
            if resume_cells:
                futures.append(pool.submit(run_resume, run, resume_cells, host, launch_cells))
            try:
                _wait_all(futures)
            except BaseException:
                run.stopping = True  # before the pool's exit waits for its threads
                raise
        for key, group in other_groups:
            _run_group(run, key, group)
    except KeyboardInterrupt as exc:
        run.stopping = True
        cleanup_all()
        raise RunInterrupted(
            [run.results[c] for c in by_id if c in run.results], str(exc) or "SIGINT"
        ) from None
    finally:
        _write_startup(run)
    return [run.results[cell_id] for cell_id in by_id]


def _write_startup(run: _Run) -> None:
    if run.launches:
        write_startup(run.options.report_dir, run.launches, run.clock.summary())


def _unknown_task(cell: Cell) -> str:
    from harness.tasks import get_task

    try:
        get_task(cell.task)
    except KeyError as exc:
        return str(exc.args[0])
    return ""


def _wait_all(futures: list[Future[None]]) -> None:
    """Wait in short slices, so the main thread takes SIGINT/SIGTERM at once; re-raise a bug."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
        for future in done:
            future.result()


def _run_group(run: _Run, key: str, group: list[Cell]) -> None:
    for cell in group:  # a stale record of an earlier run must never be judged as this run's
        for suffix in (".json", ".safetensors"):
            (run.records_dir / (cell.id + suffix)).unlink(missing_ok=True)
    by_id = {c.id: c for c in group}
    run.ensure_deepspeed_ops(group)
    launch_cells(run, key, group, run.records_dir, _judged(run, by_id), run.finish)
    if not run.options.isolate and not run.stopping:
        to_confirm = [c for c in group if _needs_confirmation(run, c)]
        if to_confirm:
            confirm_failures(run, key, to_confirm, launch_cells, _judged)


def _needs_confirmation(run: _Run, cell: Cell) -> bool:
    """An unexpected failure judged from the numbers or evidence of a finished record. Not an
    exception, crash or hang (they ended their launch), nor randomness (decided by what the
    record says the task did, which a rerun would only repeat)."""
    result = run.results.get(cell.id)
    return (result is not None and result.status == Status.FAILED
            and result.failure in (Failure.DIVERGENCE, Failure.EVIDENCE))


def launch_cells(
    run: _Run,
    key: str,
    cells: list[Cell],
    records_dir: Path,
    on_judged: Callable[[str, float], bool],
    on_broken: Callable[[Cell, CellResult], None],
    label: str = "",
    on_launch: Callable[[list[Cell], Path], None] | None = None,
    one_per_launch: bool = False,
) -> None:
    """Run `cells` (one launch shape) through as few launches as their failures allow: a cell
    that raised, crashed or hung ends its launch, and the rest go on in a fresh one; --isolate
    gives each its own. `on_launch(batch, run_dir)` hears of each launch before it starts."""
    queue = list(cells)
    launch_no = 0
    by_id = {c.id: c for c in cells}
    while queue and not run.stopping:
        alone = run.options.isolate or one_per_launch
        batch = queue[:1] if alone else queue
        launch_no += 1
        run_dir = run.options.report_dir / "launches" / f"{key}{label}-{launch_no:03d}"
        while run_dir.exists():  # an earlier run into this report dir (--resume): keep its evidence
            launch_no += 1
            run_dir = run.options.report_dir / "launches" / f"{key}{label}-{launch_no:03d}"
        if on_launch is not None:
            on_launch(batch, run_dir)
        outcome = run_launch(
            batch,
            run.emulated,
            run_dir,
            records_dir,
            run.options.timeout_s,
            on_started=_started(run) if not label else lambda _id: None,
            on_finished=on_judged,
            should_stop=lambda: run.stopping,
        )
        run.launches.append({"launch": run_dir.name, "cells": len(batch), "startup_s": outcome.startup_s,
                             "warm_up_s": outcome.warm_up.get("seconds"),
                             "deepspeed_ops_s": outcome.warm_up.get("deepspeed_ops_s")})
        run.clock.add_launch(outcome, confirming=label in ("-rerun", "-alone"))
        if outcome.broken_cell is not None:
            cell = by_id[outcome.broken_cell]
            on_broken(cell, broken_result(run, cell, outcome, run_dir))
        queue = queue[1:] if alone else outcome.not_started


def broken_result(run: _Run, cell: Cell, outcome: LaunchOutcome, run_dir: Path) -> CellResult:
    """The result of the cell that ended a launch: it raised (failed, with the traceback, as
    pytest reports an exception in a test), crashed or hung."""
    first = outcome.detail.strip().splitlines()[0] if outcome.detail.strip() else ""
    status, failure = Status.FAILED, None
    if outcome.broken_status == "crashed":
        status, reason = Status.CRASHED, f"{first}; tail of its output in detail"
    elif outcome.broken_status == "timeout":
        status = Status.TIMEOUT
        reason = (f"no result within --timeout {run.options.timeout_s:g} s; "
                  "Python stacks of every rank in detail")
    else:
        failure = Failure.EXCEPTION
        reason = f"exception in training: {_last_line(outcome.detail)} (traceback in detail)"
    return new_result(
        cell,
        status,
        reason,
        detail=outcome.detail,
        emulated=run.emulated.get(cell.id, False),
        duration_s=round(outcome.broken_seconds, 3),
        extra={"launch_dir": str(run_dir)},
        failure=failure,
    )


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip() and not line.startswith("---")]
    return lines[-1].strip() if lines else "(no message)"


def _started(run: _Run) -> Callable[[str], None]:
    def started(cell_id: str) -> None:
        if run.progress is not None:
            run.progress.cell_started(cell_id)

    return started


def _judged(run: _Run, by_id: dict[str, Cell], records_dir: Path | None = None,
            into: Callable[[Cell, CellResult], None] | None = None) -> Callable[[str, float], bool]:
    """Judge a finished cell. The launch always goes on: a cell that finished (whatever its
    numbers) left its processes usable; a divergence is confirmed afterwards in a fresh launch."""

    def judged(cell_id: str, seconds: float) -> bool:
        cell = by_id[cell_id]
        start = time.perf_counter()
        result = judge_record(
            cell,
            (records_dir or run.records_dir) / cell_id,
            duration_s=seconds,
            emulated=run.emulated.get(cell_id, False),
            env_name=run.options.env_name,
            matrix=run.matrix,
            compare_dir=_compare_dir(run.options),
        )
        if run.options.compare_records is not None:  # how the numbers moved against the other env
            _note_record_change(run, cell, result, (records_dir or run.records_dir) / cell_id)
        run.clock.add("judging", time.perf_counter() - start)
        (into or run.finish)(cell, result)
        return True

    return judged


def _compare_dir(options: RunOptions) -> Path | None:
    """Where the judge's bit-for-bit rule for non-DeepSpeed cells finds the other records: only
    between environments of one torch release (another torch may change any kernel's last bits;
    _note_record_change shows by how much)."""
    if options.compare_records is None:
        return None
    from importlib import metadata

    from harness.truth.version_diff import same_torch

    if not same_torch(options.compare_records, metadata.version("torch")):
        return None
    return options.compare_records / "records"


def _note_record_change(run: _Run, cell: Cell, result: CellResult, stem: Path) -> None:
    """--compare-records, every cell with a record (DeepSpeed ones too): how its numbers changed
    against the other environment's (bit-identical / within tolerance / diverged), in the cell's
    report.json extra "record_change". Informative: the golden decides the verdict."""
    from harness.truth.record import Record
    from harness.truth.version_diff import other_environment, record_change

    assert run.options.compare_records is not None
    try:
        record = Record.load(stem)
    except Exception:  # no record of its own (the cell errored): nothing to compare
        return
    other_name, _ = other_environment(run.options.compare_records)
    tolerance = run.matrix.tolerance_for(cell.precision, cell.strategy)
    result.extra["record_change"] = record_change(
        record, run.options.compare_records / "records" / cell.id, tolerance,
        other_name or str(run.options.compare_records))

