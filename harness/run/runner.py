"""Run cells: skip what cannot run here, group the rest by launch shape, launch, judge.

Public API (helper code, pytest items and the CLI rely on it; keep exact):
  RunOptions                                  what a run needs (dataclass below)
  run_cells(cells, options, progress=None) -> list[CellResult]
      one result for EVERY requested cell, in the order given; a cell's failure never raises.
      Ctrl-C / SIGTERM raise RunInterrupted carrying the results finished so far.
  launch_group_key(cell) -> str
      cells with the same key share a launch ("cpu2"): pytest-xdist groups items by it.

Speed comes from sharing: a launch costs seconds of start-up (imports, process group,
DeepSpeed's first initialize), a cell inside a running launch about a second. So every cell of
one shape runs in one launch. After any failure in a launch (crash, hang, exception, or a record
that left tolerance), the cells not yet judged go on in a fresh launch: a failing cell may have
left the process in a state no later cell should be judged in.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from harness.run.launch import run_launch
from harness.run.processes import cleanup_all
from harness.spec.availability import Host, check, probe_host
from harness.spec.cell import Cell
from harness.spec.matrix import Matrix, load_matrix
from harness.truth.judge import apply_expected, judge_record, new_result
from harness.truth.outcome import CellResult, Status


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
    for cell in by_id.values():
        verdict = check(cell, host)
        if not verdict.runnable:
            run.finish(
                cell, new_result(cell, Status.SKIPPED, verdict.reason, extra={"reason_code": verdict.code})
            )
            continue
        run.emulated[cell.id] = verdict.emulated
        groups.setdefault(launch_group_key(cell), []).append(cell)
    # declared failures last: each one ends its launch
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
    return [run.results[cell_id] for cell_id in by_id]


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
    queue = list(group)
    launch_no = 0
    by_id = {c.id: c for c in group}
    while queue and not run.stopping:
        batch = queue[:1] if run.options.isolate else queue
        launch_no += 1
        run_dir = run.options.report_dir / "launches" / f"{key}-{launch_no:03d}"
        while run_dir.exists():  # an earlier run into this report dir (--resume): keep its evidence
            launch_no += 1
            run_dir = run.options.report_dir / "launches" / f"{key}-{launch_no:03d}"
        outcome = run_launch(
            batch,
            run.emulated,
            run_dir,
            run.records_dir,
            run.options.timeout_s,
            on_started=_started(run),
            on_finished=_judged(run, by_id),
            should_stop=lambda: run.stopping,
        )
        if outcome.broken_cell is not None:
            cell = by_id[outcome.broken_cell]
            status = Status(outcome.broken_status)
            first = outcome.detail.strip().splitlines()[0] if outcome.detail.strip() else ""
            reason = {
                Status.CRASHED: f"{first}; tail of its output in detail",
                Status.TIMEOUT: f"no result within --timeout {run.options.timeout_s:g} s; "
                "Python stacks of every rank in detail",
                Status.ERROR: f"an exception in the cell: {_last_line(outcome.detail)}",
            }[status]
            run.finish(
                cell,
                new_result(
                    cell,
                    status,
                    reason,
                    detail=outcome.detail,
                    emulated=run.emulated.get(cell.id, False),
                    duration_s=round(outcome.broken_seconds, 3),
                    extra={"launch_dir": str(run_dir)},
                ),
            )
        queue = outcome.not_started if not run.options.isolate else queue[1:]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip() and not line.startswith("---")]
    return lines[-1].strip() if lines else "(no message)"


def _started(run: _Run) -> Callable[[str], None]:
    def started(cell_id: str) -> None:
        if run.progress is not None:
            run.progress.cell_started(cell_id)

    return started


def _judged(run: _Run, by_id: dict[str, Cell]) -> Callable[[str, float], bool]:
    """Judge a finished cell; False (end this launch) when it did not pass: a failing cell may
    have left the process in a state no later cell should be judged in."""

    def judged(cell_id: str, seconds: float) -> bool:
        cell = by_id[cell_id]
        result = judge_record(
            cell,
            run.records_dir / cell_id,
            duration_s=seconds,
            emulated=run.emulated.get(cell_id, False),
            env_name=run.options.env_name,
            matrix=run.matrix,
            compare_dir=_compare_dir(run.options),
        )
        passed = result.status == Status.PASSED  # before expectations turn it into xpassed
        run.finish(cell, result)
        return passed

    return judged


def _compare_dir(options: RunOptions) -> Path | None:
    return options.compare_records / "records" if options.compare_records is not None else None

