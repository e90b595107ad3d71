"""One script cell, one launch: `accelerate-core launch` with the cell's backend flags, the
script and its arguments, and `ACCELERATE_CORE_RECORD_DIR` so that its Accelerator records.

A cell of the accelerate implementation (a script written against Hugging Face Accelerate)
launches through `accelerate launch` instead, with the cell's settings as its flags, and the
recording shim (harness.script.accelerate_site) as a `sitecustomize.py` in a temporary directory
first on `PYTHONPATH`, deleted when the launch ends, however it ends.

The launch runs with an empty config file of its own: a user's default accelerate-core config
must not change what a cell asks for (the flags set every axis of the cell). Its output goes to
`<cell_dir>/output.log`; on timeout the whole process group is stopped.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from accelerate_core.recording import RECORD_DIR_VARIABLE, RECORD_FILE
from harness.plan.cell import CORE, Cell

STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class ScriptLaunch:
    cell: Cell
    returncode: int | None  # None: stopped at the timeout
    seconds: float
    log: Path
    record: Path  # <cell_dir>/record/record.pt, when the script got that far

    def output_tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no output)"
        return "\n".join(text.splitlines()[-lines:])


def launch_flags(cell: Cell, emulated: bool) -> list[str]:
    flags = ["--num-processes", str(cell.processes), "--mixed-precision", cell.mixed_precision]
    flags += ["--cpu"] if cell.device == "cpu" else ["--no-cpu"]
    if cell.zero_stage is not None:
        flags += ["--backend", "deepspeed", "--zero-stage", str(cell.zero_stage)]
        if emulated:
            flags.append("--cpu-fp16-emulation")
    else:
        flags += ["--backend", cell.strategy]
    return flags


def accelerate_launch_flags(cell: Cell, port: int) -> tuple[list[str], dict[str, str]]:
    """`accelerate launch` flags (and environment) for the cell. Accelerate's launcher takes one
    of `--cpu`, `--multi_gpu`, `--use_deepspeed`, `--use_fsdp`, and honours `--cpu` only in its
    one-process launcher: a CPU cell of N processes gets `ACCELERATE_USE_CPU=true`, the variable
    `--cpu` sets, so that its Accelerator runs on the CPU (what it then does with DeepSpeed or
    FSDP is Accelerate's choice, and the evidence says what it was)."""
    mixed = "no" if cell.precision == "fp32" else cell.precision
    flags = ["--num_processes", str(cell.processes), "--num_machines", "1", "--mixed_precision", mixed,
             "--dynamo_backend", "no", "--main_process_port", str(port)]
    env: dict[str, str] = {}
    if cell.zero_stage is not None:
        flags += ["--use_deepspeed", "--zero_stage", str(cell.zero_stage)]
    elif cell.strategy == "fsdp":
        flags += ["--use_fsdp", "--fsdp_version", "2"]
    elif cell.processes > 1:
        flags.append("--multi_gpu")
    elif cell.device == "cpu":
        flags.append("--cpu")
    if cell.device == "cpu":
        env["ACCELERATE_USE_CPU"] = "true"
    return flags, env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# Accelerate's launcher binds --main_process_port itself, after its own check that the port is
# free (it takes torchrun's standalone mode, port 0, only when the check finds it taken): a
# port picked here can still be taken in between. Such a launch fails before any rank trained,
# saying so in these words (torch's TCPStore, errno EADDRINUSE), and is relaunched on a new port.
PORT_TAKEN = re.compile(r"address already in use|EADDRINUSE", re.IGNORECASE)
PORT_ATTEMPTS = 3
SHIM_PREFIX = "harness-accelerate-shim-"  # + the harness's pid + "-" + a random part


def remove_orphaned_shims(folder: Path | None = None) -> list[Path]:
    """Remove the shim directories of harness processes that died without their `finally`
    (SIGKILL); returns what it removed. A directory's pid names the process that owns it."""
    removed = []
    for path in Path(folder or tempfile.gettempdir()).glob(f"{SHIM_PREFIX}*-*"):
        pid = path.name[len(SHIM_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


@contextlib.contextmanager
def accelerate_shim(variable: str) -> Iterator[Path]:
    """A temporary directory holding the recording shim's `sitecustomize.py`; deleted on exit,
    and by the next shim's start when a SIGKILL left it behind."""
    from harness.script.accelerate_site import SITECUSTOMIZE

    root = str(Path(__file__).resolve().parent.parent.parent)  # the project: harness, accelerate_core
    remove_orphaned_shims()
    directory = Path(tempfile.mkdtemp(prefix=f"{SHIM_PREFIX}{os.getpid()}-"))
    try:
        (directory / "sitecustomize.py").write_text(SITECUSTOMIZE.format(variable=variable, root=root),
                                                    encoding="utf-8")
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_script_cell(cell: Cell, script: Path, arguments: list[str], cell_dir: Path, *,
                    emulated: bool, timeout_s: float) -> ScriptLaunch:
    cell_dir.mkdir(parents=True, exist_ok=True)
    record_dir = cell_dir / "record"
    (record_dir / RECORD_FILE).unlink(missing_ok=True)  # never judge an earlier run's record
    config = cell_dir / "launch_config.yaml"
    if cell.implementation != CORE:
        # Accelerate's own launcher, with a config of the harness's (not the user's default).
        config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\n", encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
        env.update({RECORD_DIR_VARIABLE: str(record_dir), "PYTHONUNBUFFERED": "1"})
        env.setdefault("OMP_NUM_THREADS", "1")
        with accelerate_shim(RECORD_DIR_VARIABLE) as shim:
            env["PYTHONPATH"] = os.pathsep.join([str(shim), *filter(None, [env.get("PYTHONPATH")])])

            def on_port(port: int) -> tuple[list[str], dict[str, str]]:
                flags, extra = accelerate_launch_flags(cell, port)
                return ([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
                         *flags, str(script), *arguments], {**env, **extra})

            return launch_on_a_free_port(cell, on_port, cell_dir, record_dir, timeout_s)
    config.write_text("version: 1\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_CORE_")}
    env.update({RECORD_DIR_VARIABLE: str(record_dir), "ACCELERATE_CORE_CONFIG_FILE": str(config),
                "PYTHONUNBUFFERED": "1"})
    env.setdefault("OMP_NUM_THREADS", "1")
    command = [sys.executable, "-m", "accelerate_core.commands.main", "launch",
               *launch_flags(cell, emulated), str(script), *arguments]
    return _launch(cell, command, env, cell_dir, record_dir, timeout_s)


def launch_on_a_free_port(cell: Cell, on_port: Callable[[int], tuple[list[str], dict[str, str]]],
                          cell_dir: Path, record_dir: Path, timeout_s: float) -> ScriptLaunch:
    """Launch `on_port(port)`'s command on a free port; when its port was taken before the
    launcher bound it (PORT_TAKEN in its output), relaunch on another, PORT_ATTEMPTS in all. The
    log of the launch judged says what happened to the attempts before it."""
    notes: list[str] = []
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = _free_port()
        command, env = on_port(port)
        launch = _launch(cell, command, env, cell_dir, record_dir, timeout_s, notes)
        if launch.returncode in (0, None) or not PORT_TAKEN.search(launch.output_tail(200)):
            return launch
        notes.append(f"# attempt {attempt}: port {port} was taken before the launcher bound it; relaunched")
    return launch


def _launch(cell: Cell, command: list[str], env: dict[str, str], cell_dir: Path, record_dir: Path,
            timeout_s: float, notes: list[str] | None = None) -> ScriptLaunch:
    log = cell_dir / "output.log"
    start = time.monotonic()
    with open(log, "wb") as out:
        shim = cell.implementation != CORE and "PYTHONPATH" in env  # where the recording shim was
        shown = [f"PYTHONPATH={env['PYTHONPATH']}"] if shim else []
        out.write(("$ " + " ".join([*shown, *command]) + "\n").encode())
        for note in notes or []:  # what happened to the attempts before this one
            out.write((note + "\n").encode())
        out.flush()
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            returncode = None
        except BaseException:  # Ctrl-C: no rank outlives the harness
            _stop(proc)
            raise
    return ScriptLaunch(cell, returncode, time.monotonic() - start, log, record_dir / RECORD_FILE)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the launch's process group (the launcher stops its ranks), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue
