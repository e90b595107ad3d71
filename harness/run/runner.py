"""Run cells: skip what cannot run here, group the rest by launch shape, launch, judge.

Public API (helper code, pytest items and the CLI rely on it; keep exact):
  RunOptions                                  what a run needs (harness.run.options)
  run_cells(cells, options, progress=None) -> list[CellResult]
      one result for EVERY requested cell, in the order given; a cell's failure never raises.
      Ctrl-C / SIGTERM raise RunInterrupted carrying the results finished so far.
  run_outcome(cells, options, progress=None) -> RunOutcome
      the same results, with the run's start-up and profile (what the CLI reports).
  launch_group_key(cell) -> str
      cells with the same key share a launch ("cpu2"): pytest-xdist groups items by it.

Speed comes from sharing: a launch costs seconds of start-up (imports, process group,
DeepSpeed's one-off op build and first initialize), a cell inside a running launch about a
second. So every cell of one shape runs in one launch, and start-up is measured apart
(the outcome's StartupSummary, the report's start-up time), never inside a cell's clock or
--timeout.

Failures: a cell that raised, crashed or hung may have left its processes unusable, so it ends
its launch (its processes exit or are stopped) and the cells not yet run go on in a fresh one
(harness.run.launch_loop). A cell judged wrong (its record diverged from the golden) finished
normally: the launch goes on. Each such unexpected failure is then confirmed in a fresh launch
(harness.run.confirm) and the report says whether the rerun agreed: a result that changes when
the cells before it change was left behind by them, not made by the cell.
"""

from __future__ import annotations

from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait

from harness.judge.outcome import CellResult
from harness.layout.report_dir import ReportDir
from harness.plan.availability import probe_host
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.run.confirm import confirm_failures
from harness.run.context import RunContext
from harness.run.judging import judging, needs_confirmation
from harness.run.launch_loop import launch_cells
from harness.run.options import ProgressLike, RunOptions
from harness.run.processes import cleanup_all
from harness.run.resume_launches import run_resume
from harness.run.run_outcome import RunInterrupted, RunOutcome
from harness.run.schedule import launch_group_key, schedule
from harness.run.startup import StartupSummary

__all__ = ["ProgressLike", "RunInterrupted", "RunOptions", "RunOutcome", "launch_group_key", "run_cells",
           "run_outcome"]


def run_cells(
    cells: list[Cell], options: RunOptions, progress: ProgressLike | None = None
) -> list[CellResult]:
    return run_outcome(cells, options, progress).results


def run_outcome(cells: list[Cell], options: RunOptions, progress: ProgressLike | None = None) -> RunOutcome:
    run = RunContext(options, options.matrix or load_matrix(options.matrix_path), progress)
    host = options.host or probe_host(options.allow_cpu_fp16_emulation)
    by_id = {cell.id: cell for cell in cells}
    plan = schedule(run, list(by_id.values()), host)
    options.report_dir.mkdir(parents=True, exist_ok=True)
    parallel = options.parallel_launches or (2 if host.cpu_cores >= 2 else 1)
    try:
        with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="launch") as pool:
            futures = [pool.submit(_run_group, run, key, group) for key, group in plan.cpu_groups]
            if plan.resume_cells:
                futures.append(pool.submit(run_resume, run, plan.resume_cells, host))
            try:
                _wait_all(futures)
            except BaseException:
                run.stopping = True  # before the pool's exit waits for its threads
                raise
        for key, group in plan.device_groups:
            _run_group(run, key, group)
    except KeyboardInterrupt as exc:
        run.stopping = True
        cleanup_all()
        finished = [run.results[c] for c in by_id if c in run.results]
        raise RunInterrupted(RunOutcome(finished, _kept_startup(run)), str(exc) or "SIGINT") from None
    except BaseException:
        _kept_startup(run)  # a bug in the harness: the launches that ran are still on record
        raise
    return RunOutcome([run.results[cell_id] for cell_id in by_id], _kept_startup(run))


def _kept_startup(run: RunContext) -> StartupSummary | None:
    """The run's start-up and profile, also kept in the report dir's startup.json (documented in
    docs/reading-the-report.md for readers of the folder; the CLI uses the returned object)."""
    startup = run.startup()
    if startup is not None:
        startup.write(run.layout)
    return startup


def _wait_all(futures: list[Future[None]]) -> None:
    """Wait in short slices, so the main thread takes SIGINT/SIGTERM at once; re-raise a bug."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
        for future in done:
            future.result()


def _run_group(run: RunContext, key: str, group: list[Cell]) -> None:
    """One launch shape: its cells through as few launches as their failures allow, then its
    unexpected judged failures confirmed in a fresh launch."""
    ReportDir.forget_records(run.records_dir, [cell.id for cell in group])
    run.ensure_deepspeed_ops(group)
    launch_cells(run, key, group, run.records_dir, judging(run, {c.id: c for c in group}), run.finish)
    if not run.options.isolate and not run.stopping:
        to_confirm = [c for c in group if needs_confirmation(run, c)]
        if to_confirm:
            confirm_failures(run, key, to_confirm)
