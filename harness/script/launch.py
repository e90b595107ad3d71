"""One script cell, one launch: `accelerate-core launch` with the cell's backend flags, the
script and its arguments, and `ACCELERATE_CORE_RECORD_DIR` so that its Accelerator records.

The launch runs with an empty config file of its own: a user's default accelerate-core config
must not change what a cell asks for (the flags set every axis of the cell). Its output goes to
`<cell_dir>/output.log`; on timeout the whole process group is stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from accelerate_core.recording import RECORD_DIR_VARIABLE, RECORD_FILE
from harness.spec.cell import Cell

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


def run_script_cell(cell: Cell, script: Path, arguments: list[str], cell_dir: Path, *,
                    emulated: bool, timeout_s: float) -> ScriptLaunch:
    cell_dir.mkdir(parents=True, exist_ok=True)
    record_dir = cell_dir / "record"
    (record_dir / RECORD_FILE).unlink(missing_ok=True)  # never judge an earlier run's record
    config = cell_dir / "launch_config.yaml"
    config.write_text("version: 1\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_CORE_")}
    env.update({RECORD_DIR_VARIABLE: str(record_dir), "ACCELERATE_CORE_CONFIG_FILE": str(config),
                "PYTHONUNBUFFERED": "1"})
    env.setdefault("OMP_NUM_THREADS", "1")
    command = [sys.executable, "-m", "accelerate_core.commands.main", "launch",
               *launch_flags(cell, emulated), str(script), *arguments]
    log = cell_dir / "output.log"
    start = time.monotonic()
    with open(log, "wb") as out:
        out.write(("$ " + " ".join(command) + "\n").encode())
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
