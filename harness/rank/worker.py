"""What each rank runs inside one `torch.distributed.run` launch: cell after cell.

    python -m torch.distributed.run ... -m harness.rank.worker RUN_DIR

RUN_DIR is a launch directory (harness.layout.launch_dir.LaunchDir, which lists its files): its
plan lists the cells (ids, emulation flag), where records go, and the import paths of a user's
tasks (imported before the first cell). The process group
is created once by the first cell's Accelerator and reused; between cells `train_task`
frees the Accelerator and reseeds from the task, so cells do not leak into each other.

This rank writes its pid, its output, its stacks on SIGUSR1 and, per cell, when it started and
finished (rank 0) or why it raised (any rank, then the rank exits, so the launch ends and the
parent runs the rest in a fresh launch); all small, written atomically, watched by the parent.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

from harness.atomic_files import write_text_atomic
from harness.layout.launch_dir import LaunchDir
from harness.plan.cell import Cell, cell_from_fields
from harness.rank.phases import PhaseTimer

EXIT_CELL_ERROR = 3
_keep_open: list[TextIO] = []  # faulthandler writes to these fds for the life of the process


def _redirect_output(log: Path) -> None:
    # dup2 onto fds 1 and 2 so that C-level output (gloo, DeepSpeed, a fatal error) lands here too.
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def _install_stack_dumps(stacks: Path) -> None:
    out = open(stacks, "w")  # noqa: SIM115 - must stay open for faulthandler
    _keep_open.append(out)
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True, chain=False)
    faulthandler.enable(file=sys.stderr, all_threads=True)  # segfaults: stacks into the rank's log


def _exit_with_launcher() -> None:
    """If torchrun dies (killed with the runner), never outlive it: orphans are a leak."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="exit-with-launcher", daemon=True).start()


def warm_up(cells: list[Cell]) -> dict[str, float]:
    """Pay the one-off costs before the first cell starts, so that a cell's duration and its
    --timeout measure the cell, not the launch (startup has its own grace in the parent).
    Returns what took how long, for the report's start-up time."""
    import torch

    import harness.rank.loop
    import harness.tasks  # noqa: F401 - registers the tasks

    # The first optimizer built in a process imports torch._dynamo: seconds on a busy machine.
    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    timings: dict[str, float] = {}
    if any(cell.is_deepspeed for cell in cells):
        import deepspeed  # noqa: F401 - only for launches with DeepSpeed cells

        if any(cell.is_deepspeed and cell.device == "cpu" for cell in cells):
            start = time.perf_counter()
            build_deepspeed_cpu_ops()
            timings["deepspeed_ops_s"] = round(time.perf_counter() - start, 3)
    return timings


def _freeze_survivors() -> None:
    """Collect, then leave whatever survived out of every later collection (gc.freeze).

    A cell ends in several full collections (DeepSpeed's own, the core's teardown and
    free_memory), and a full collection walks every object alive: with torch and deepspeed
    imported that was 0.1-0.23 s a call, three quarters of a single-process cell. What survives
    a full collection here (modules, imported lazily by a first cell too, and their caches) lives
    as long as the process anyway; everything a later cell creates is still collected after it,
    so no cell keeps another's objects. Numbers are untouched: only the collector's walk changes."""
    gc.collect()
    gc.freeze()


def build_deepspeed_cpu_ops() -> None:
    """DeepSpeed JIT-compiles its CPU shared-memory comm op the first time an engine starts on a
    machine (60-90 s, then cached under TORCH_EXTENSIONS_DIR): built or loaded here, before any
    cell's clock, so that it counts as start-up and never eats a cell's --timeout. Every rank
    loads it; torch's extension loader lets one build while the others wait on its lock."""
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is not None:
        builder.load()


def run_cell(cell: Cell, emulated: bool, records_dir: Path, timer: PhaseTimer | None = None) -> Any:
    """Train one cell through the core on this rank; returns the Record on the main process."""
    from harness.rank.loop import train_task
    from harness.rank.resume_point import span_of, with_source
    from harness.tasks import get_task

    task = get_task(cell.task)
    record = train_task(
        task,
        precision=cell.precision,
        cpu=cell.device == "cpu",
        zero_stage=cell.zero_stage,
        fsdp=cell.is_fsdp,
        cpu_fp16_emulation=emulated,
        span=span_of(cell, records_dir),  # a resume source or destination: harness.rank.resume_point
        timer=timer,
        implementation=cell.implementation,
    )
    if record is not None:
        record = with_source(cell, record, records_dir, task)  # a destination: the whole run
        record.save(records_dir / cell.id)
    if timer is not None:
        timer.lap("save")
    return record


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    launch = LaunchDir(Path(args[0]))
    plan = launch.read_plan()
    rank = int(os.environ.get("RANK", "0"))
    launch.create()
    _redirect_output(launch.log(rank))
    _install_stack_dumps(launch.stack(rank))
    write_text_atomic(launch.pid_file(rank), str(os.getpid()))
    _exit_with_launcher()
    records_dir = Path(plan["records_dir"])
    cells = [cell_from_fields(dict(entry["cell"])) for entry in plan["cells"]]  # resume cells too
    task_imports = list(plan.get("task_imports", []))
    warm_start = time.perf_counter()
    timings: dict[str, float] = {}
    try:
        timings = warm_up(cells)
    except BaseException:  # e.g. deepspeed fails to import: the first cell reports it below
        traceback.print_exc()
    _freeze_survivors()
    if rank == 0:
        timings["seconds"] = round(time.perf_counter() - warm_start, 3)
        write_text_atomic(launch.warm_up, json.dumps(timings))
    for cell, entry in zip(cells, plan["cells"], strict=True):
        cell_id = cell.id
        print(f"[harness.rank.worker rank {rank}] cell {cell_id} starts", flush=True)
        if rank == 0:
            write_text_atomic(launch.started(cell_id), json.dumps({"time": time.time()}))
        start = time.perf_counter()
        timer = PhaseTimer()
        try:
            if task_imports:  # the user's tasks, as the matrix named them (an error is this cell's)
                from harness.tasks import import_tasks

                import_tasks(task_imports)
            run_cell(cell, bool(entry.get("emulated", False)), records_dir, timer)
        except BaseException:
            text = traceback.format_exc()
            print(text, file=sys.stderr, flush=True)
            write_text_atomic(launch.error(cell_id, rank), text)
            # The process group may be mid-collective on other ranks: end the launch; the parent
            # runs the remaining cells in a fresh one.
            os._exit(EXIT_CELL_ERROR)
        _freeze_survivors()
        timer.lap("collector")
        if rank == 0:
            seconds = time.perf_counter() - start
            write_text_atomic(launch.finished(cell_id),
                              json.dumps({"seconds": seconds, "phases": timer.seconds}))
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
