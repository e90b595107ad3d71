"""Shared by the runner, CLI and fault tests: a small matrix file, a CLI run in a subprocess or
in this process, and the check that no process of a run is left behind."""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import tomllib

from harness.paths import MATRIX_PATH
from harness.plan.semantics_tolerances import SEMANTICS_PER_TASK
from harness.plan.tolerances import WEIGHTS_PER_TASK as WEIGHTS

REPO_ROOT = Path(__file__).resolve().parents[2]

# A small real matrix: the `regression` task (its goldens are checked in) on one process and on
# two with DDP, in fp32 only (the fastest cells), plus the canaries as opt-in cells.
SMALL_MATRIX = """
[axes]
task = ["regression"]
device = ["cpu", "cuda"]
strategy = ["single", "ddp"]
precision = ["fp32"]

[[shapes]]
device = "cpu"
processes = 1
strategies = ["single"]

[[shapes]]
device = "cpu"
processes = 2
strategies = ["ddp"]

[[shapes]]
device = "cuda"
processes = 2
strategies = ["ddp"]

[[include]]
ids = ["canary_crash-cpu2-ddp-fp32", "canary_hang-cpu2-ddp-fp32", "canary_nan-cpu1-single-fp32"]
opt_in = "canary"
reason = "fault canaries: only when named with -k canary"
"""


# The repository's tolerance table: a matrix file carries its own (the run judges with them).
_TOLERANCES = MATRIX_PATH.read_text()[MATRIX_PATH.read_text().index("[tolerances]"):]


def write_matrix(directory: Path, text: str = SMALL_MATRIX, extra: str = "") -> Path:
    path = directory / "matrix.toml"
    tolerances = "" if "[tolerances" in text + extra else "\n" + _TOLERANCES
    return write_matrix_file(path, text + extra + tolerances)


def write_matrix_file(path: Path, text: str) -> Path:
    """Write a matrix (the repository's, edited) at `path`, with the per-task tolerances' files its
    [tolerances] weights_per_task and semantics_per_task name copied beside it, as they are beside
    the repository's."""
    path.write_text(text, encoding="utf-8")
    for key in (WEIGHTS, SEMANTICS_PER_TASK):
        named = tomllib.loads(text).get("tolerances", {}).get(key)
        if isinstance(named, str) and not (path.parent / named).exists():
            shutil.copy(MATRIX_PATH.parent / named, path.parent / named)
    return path


def harness_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def run_harness(
    *args: str, timeout: float = 240.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m harness ARGS` from the repo root; the output comes back as text."""
    full_env = {**os.environ, **(env or {}), "CI": "1"}  # CI=1: plain progress lines, no live bar
    return subprocess.run(
        harness_cmd(*args), cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, env=full_env
    )


# What `python -m harness` may change in the process that runs it: `run` turns SIGINT, SIGTERM
# and SIGHUP into KeyboardInterrupt (harness.run.signals.install; ignore_further sets SIG_IGN
# after an interrupt) and registers an atexit cleanup of its launches.
_RUN_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
OUTPUT_TAIL = 3000  # characters of a run's output in a failure message


def run_harness_in_process(
    *args: str, timeout: float = 240.0, env: dict[str, str] | None = None, cwd: Path = REPO_ROOT
) -> subprocess.CompletedProcess[str]:
    """`python -m harness ARGS` as harness.cli.main.main in this process (see run_in_process):
    what `run_harness` gives, without a fresh interpreter importing torch again (about 4 CPU-s).
    Every launch a run makes is still a real torchrun. For tests where the process is not the
    point: signals sent to the runner, a pipe, the console entry point need `run_harness`."""
    from harness.cli.main import main

    return run_in_process(main, args, name="python -m harness", timeout=timeout, env=env, cwd=cwd)


def run_in_process(
    main: Callable[[list[str]], int],
    args: Sequence[str],
    *,
    name: str,
    timeout: float = 240.0,
    env: dict[str, str] | None = None,
    cwd: Path = REPO_ROOT,
) -> subprocess.CompletedProcess[str]:
    """`main(args)` of the command `name`, with what its process would have given: the exit
    status, stdout and stderr as text, and for an uncaught exception its traceback on stderr and
    status 1. `env` is laid over os.environ (processes it starts inherit it; CI=1 as in
    `run_harness`: plain progress lines) and `cwd` is its working directory; both, the signal
    handlers, the root logger and the warning filters are restored afterwards. Past `timeout`
    it is interrupted as Ctrl-C would (a run writes its partial report) and TimeoutError carries
    its output."""
    out, err = io.StringIO(), io.StringIO()
    with (_process_state_restored(cwd), _environment({**(env or {}), "CI": "1"}),
          contextlib.redirect_stdout(out), contextlib.redirect_stderr(err)):
        status, expired = _call_with_deadline(lambda: main(list(args)), timeout)
    done = subprocess.CompletedProcess([*name.split(), *args], status, out.getvalue(), err.getvalue())
    if expired:
        raise TimeoutError(f"`{name} {' '.join(args)}` did not finish within {timeout:.0f} s "
                           f"(interrupted); its output:\n{output_tail(done)}")
    return done


def output_tail(done: subprocess.CompletedProcess[str], chars: int = OUTPUT_TAIL) -> str:
    """The end of a run's stdout and stderr, for a failure message."""
    return f"--- stdout:\n{done.stdout[-chars:]}\n--- stderr:\n{done.stderr[-chars:]}"


def _call_with_deadline(call: Callable[[], int], timeout: float) -> tuple[int, bool]:
    """(exit status, whether the deadline interrupted it). At the deadline a watchdog sends this
    process SIGINT while `call` still runs: the run stops its launches and reports, as it would
    for Ctrl-C. Its KeyboardInterrupt, should it land just after `call` returned, is absorbed."""
    expired = threading.Event()
    running = threading.Lock()  # held while `call` runs: no SIGINT once it is released

    def interrupt() -> None:
        if running.acquire(blocking=False):  # `call` has returned: nothing to interrupt
            running.release()
            return
        expired.set()
        os.kill(os.getpid(), signal.SIGINT)

    watchdog = threading.Timer(timeout, interrupt)
    watchdog.daemon = True
    status = 130
    try:
        with running:
            watchdog.start()
            status = _exit_status(call)
        watchdog.cancel()
        watchdog.join()
        time.sleep(0)  # a SIGINT sent just before the release is handled here, inside the try
    except KeyboardInterrupt:
        if not expired.is_set():
            raise  # a real Ctrl-C of the test run
    return status, expired.is_set()


def _exit_status(call: Callable[[], int]) -> int:
    """The status `python -m harness` would exit with (sys.exit's rules; a traceback and 1 for an
    uncaught exception, printed where the interpreter prints it)."""
    try:
        return call()
    except SystemExit as exc:  # argparse's usage errors
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1


@contextlib.contextmanager
def _environment(overrides: dict[str, str]) -> Iterator[None]:
    """os.environ with `overrides`, then exactly as it was (keys added by the run removed too)."""
    saved = dict(os.environ)
    os.environ.update(overrides)
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        for key, value in saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


@contextlib.contextmanager
def _process_state_restored(cwd: Path) -> Iterator[None]:
    """Run in `cwd`; afterwards the cwd, the signal handlers, the root logger and the warning
    filters are as before, and the run's atexit cleanup is unregistered (a run that returned has
    stopped every launch it started, so copies of it would only pile up in the test process)."""
    from harness.run.processes import cleanup_all

    handlers = {sig: signal.getsignal(sig) for sig in _RUN_SIGNALS}
    root = logging.getLogger()
    level, log_handlers = root.level, list(root.handlers)
    before = os.getcwd()
    os.chdir(cwd)
    try:
        with warnings.catch_warnings():
            yield
    finally:
        os.chdir(before)
        for sig, handler in handlers.items():
            if handler is not None:  # None: a handler not set from Python, which nothing here replaces
                signal.signal(sig, handler)
        root.setLevel(level)
        root.handlers[:] = log_handlers
        atexit.unregister(cleanup_all)


def processes_mentioning(marker: str) -> list[psutil.Process]:
    """Live processes whose command line contains `marker` (e.g. a test's unique tmp dir): a
    launch's torchrun and ranks carry the run's report dir in their arguments."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if marker in cmdline and proc.pid != os.getpid():
            found.append(proc)
    return found


def assert_no_leftovers(marker: str, wait_s: float = 5.0) -> None:
    """No process of the run remains (after a short grace for exits already under way)."""
    deadline = time.monotonic() + wait_s
    left = processes_mentioning(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes left behind: {[(p.pid, ' '.join(p.cmdline())) for p in left]}"


def report(report_dir: Path) -> dict[str, Any]:
    return json.loads((report_dir / "report.json").read_text(encoding="utf-8"))


def cells_by_id(report_dir: Path) -> dict[str, dict[str, Any]]:
    return {cell["id"]: cell for cell in report(report_dir)["cells"]}


# What a real one-process CPU fp32 run records about itself (harness.rank.recorder); a golden
# copied as a cell's record needs it, since the judge checks evidence before numbers.
SINGLE_CPU_EVIDENCE = {"strategy": "single", "strategy_class": "SingleDeviceStrategy",
                       "world_size": 1, "device": "cpu", "emulated": False,
                       "random_draws": {"steps": 16, "drawing": 0, "generators": ""},
                       "activation_dtype": "float32", "activation_grad_dtype": "float32",
                       "eval_activation_dtype": "float32",
                       "unwrap_model": {"is_the_prepared_module": True, "class": "RegressionModel"},
                       "gather": {"batches": 2, "agreed": 2, "first_disagreement": None}}


def golden_as_record(golden_stem: Path, record_stem: Path) -> None:
    """A checked-in fp32 golden saved as a cpu1 single cell's record."""
    from harness.record.record_format import Record

    record = Record.load(golden_stem)
    record.meta = {"evidence": dict(SINGLE_CPU_EVIDENCE)}
    record.save(record_stem)
