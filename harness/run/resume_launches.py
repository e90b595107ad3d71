"""Running resume cells: every source of one launch shape in one launch, then every destination
of one shape in one launch (docs/resume.md).

A resume cell needs two runs on (usually) two launch shapes: its source trains k optimizer
steps and saves (accelerator.save_state), its destination loads (accelerator.load_state) and
finishes the run. Sources are shared: `classifier-cpu2-zero3-fp32@step5` is saved once and
resumed by every destination that names it. So a grid of N resume cells costs
(source shapes + destination shapes) launches, about four on CPU, not 2N:

1. sources, grouped by launch shape, the shapes in parallel; the golden checkpoints (written by
   the plain-PyTorch reference in this process, harness.golden.reference_checkpoint) meanwhile;
2. destinations whose source left a complete checkpoint, grouped by launch shape, in parallel;
   a destination whose source failed is an error naming the source's failure, never run.

Checkpoints and the sources' records go under the report dir (`checkpoints/`, `records/`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.judge.cell_verdict import new_result
from harness.judge.outcome import CellResult, Status
from harness.judge.resume_verdict import judge_resume, source_problem
from harness.layout.report_dir import ReportDir
from harness.plan.availability import Host, check
from harness.plan.cell import Cell, ResumeCell, SourceCell
from harness.plan.resume_cells import checkpoints_dir
from harness.run.context import RunContext
from harness.run.launch_loop import launch_cells
from harness.run.schedule import launch_group_key


def run_resume(run: RunContext, cells: list[ResumeCell], host: Host) -> None:
    """Judge every resume cell in `cells` (each already checked runnable at its destination)."""
    records = run.records_dir
    checkpoints = checkpoints_dir(records)
    waiting: dict[str, list[ResumeCell]] = {}  # checkpoint name -> its destinations
    sources: dict[str, SourceCell] = {}
    goldens: dict[str, ResumeCell] = {}  # checkpoint name -> a cell naming it (task, precision, step)
    for cell in cells:
        source = cell.source_cell
        if source is not None:
            verdict = check(source, host)
            if not verdict.runnable:
                run.finish(cell, new_result(cell, Status.SKIPPED, f"its source {source.id} cannot run here: "
                                            f"{verdict.reason}", extra={"reason_code": verdict.code}))
                continue
            saved = SourceCell(**asdict(source), save_after=cell.resume_step)
            sources.setdefault(saved.id, saved)
            run.emulated[saved.id] = verdict.emulated
        else:
            goldens.setdefault(cell.checkpoint_name, cell)
        waiting.setdefault(cell.checkpoint_name, []).append(cell)
    for name in waiting:  # never resume from, or judge, what an earlier run left here
        shutil.rmtree(checkpoints / name, ignore_errors=True)
        ReportDir.forget_records(records, [name] + [c.id for c in waiting[name]])
    failed: dict[str, str] = {}  # checkpoint name -> why its source left nothing to resume from
    jobs: list[Callable[[], None]] = [lambda: _write_goldens(goldens, records, checkpoints, failed)]
    for key, group in _by_shape(list(sources.values())).items():
        jobs.append(_source_launch(run, key, group, checkpoints, failed))
    _in_parallel(run, jobs)
    ready: list[Cell] = []
    for name, destinations in waiting.items():
        for cell in destinations:
            if name in failed:
                run.finish(cell, new_result(cell, Status.ERROR, f"its source {name} failed: {failed[name]}"))
            else:
                ready.append(cell)
    if run.stopping:
        return
    _in_parallel(run, [_destination_launch(run, key, group)
                       for key, group in _by_shape(ready).items()])


def _by_shape(cells: list[Any]) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = {}
    for cell in cells:
        groups.setdefault(launch_group_key(cell), []).append(cell)
    return groups


def _in_parallel(run: RunContext, jobs: list[Callable[[], None]]) -> None:
    workers = max(1, run.options.parallel_launches or 2)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="resume") as pool:
        for future in [pool.submit(job) for job in jobs]:
            future.result()  # a bug in a job surfaces here, in the runner's thread


def _write_goldens(goldens: dict[str, ResumeCell], records: Path, checkpoints: Path,
                   failed: dict[str, str]) -> None:
    from harness.golden.reference_checkpoint import write_golden_checkpoint
    from harness.tasks import get_task

    for name, cell in goldens.items():
        try:
            record = write_golden_checkpoint(get_task(cell.task), cell.precision, cell.resume_step,
                                             checkpoints / name)
            record.save(records / name)
        except Exception as exc:  # the reference itself failed: its destinations say so
            failed[name] = f"the reference could not write it: {type(exc).__name__}: {exc}"


def _source_launch(run: RunContext, key: str, group: list[SourceCell], checkpoints: Path,
                   failed: dict[str, str]) -> Callable[[], None]:
    def judged(cell_id: str, _seconds: float) -> bool:
        problem = source_problem(run.records_dir / cell_id, checkpoints / cell_id)
        if problem is not None:
            failed[cell_id] = problem
        return True

    def broken(cell: Cell, result: CellResult) -> None:
        failed[cell.id] = f"{result.status.value}: {result.reason}"

    return lambda: launch_cells(run, key, group, run.records_dir, judged, broken, label="-resume-source")


def _destination_launch(run: RunContext, key: str, group: list[ResumeCell]) -> Callable[[], None]:
    from harness.tasks import get_task

    by_id = {cell.id: cell for cell in group}

    def judged(cell_id: str, seconds: float) -> bool:
        cell = by_id[cell_id]
        emulated = run.emulated.get(cell_id, False)
        run.finish(cell, judge_resume(cell, run.records_dir, duration_s=seconds, emulated=emulated,
                                      env_name=run.options.env_name, matrix=run.matrix,
                                      task=get_task(cell.task)))
        return True

    return lambda: launch_cells(run, key, group, run.records_dir, judged, run.finish, label="-resume")
