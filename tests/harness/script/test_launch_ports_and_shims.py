"""What script mode's launches of Hugging Face Accelerate leave to chance, and how they do not:

- a port picked free can be taken before the launcher binds it: that launch is relaunched on
  another port (its log says so), and a launch that failed for any other reason is not;
- a shim directory whose harness process was SIGKILLed (no `finally` ran) is removed by the
  next shim's start; one whose process is alive is left alone.

Real processes and real sockets; no launch of Accelerate (the launcher is stood in for by a
process that binds the port it is given, as the launcher's TCPStore does).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.plan.cell import Cell
from harness.script import script_launch

CELL = Cell.from_id("t-cpu2-ddp-fp32-accelerate")
BIND = "import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); print('bound')"


def _binding(port: int) -> tuple[list[str], dict[str, str]]:
    return [sys.executable, "-c", BIND, str(port)], {}


def test_a_launch_whose_port_was_taken_is_relaunched_on_a_free_one(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        ports = iter([taken])  # the first pick is the taken port, as a lost race would leave it
        real_free_port = script_launch._free_port
        monkeypatch.setattr(script_launch, "_free_port", lambda: next(ports, None) or real_free_port())
        launch = script_launch.launch_on_a_free_port(CELL, _binding, tmp_path, tmp_path / "record", 60)
    log = launch.log.read_text(encoding="utf-8")
    assert launch.returncode == 0, log
    assert f"# attempt 1: port {taken} was taken before the launcher bound it; relaunched" in log
    assert log.startswith("$ ") and "bound" in log  # the command line still comes first


def test_a_launch_that_failed_otherwise_runs_once(tmp_path: Path) -> None:
    calls = []

    def failing(port: int) -> tuple[list[str], dict[str, str]]:
        calls.append(port)
        return [sys.executable, "-c", "raise SystemExit('the script raised')"], {}

    launch = script_launch.launch_on_a_free_port(CELL, failing, tmp_path, tmp_path / "record", 60)
    assert launch.returncode == 1 and len(calls) == 1
    assert "relaunched" not in launch.log.read_text(encoding="utf-8")


def test_a_port_taken_every_time_ends_after_the_last_attempt(tmp_path: Path) -> None:
    def taken(port: int) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, "-c", "raise OSError(98, 'Address already in use')"], {}

    launch = script_launch.launch_on_a_free_port(CELL, taken, tmp_path, tmp_path / "record", 60)
    log = launch.log.read_text(encoding="utf-8")
    assert launch.returncode == 1
    assert log.count("relaunched") == script_launch.PORT_ATTEMPTS - 1, log


def test_a_sigkilled_harness_shim_directory_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead = tmp_path / f"{script_launch.SHIM_PREFIX}{gone.stdout.strip()}-abc123"
    alive = tmp_path / f"{script_launch.SHIM_PREFIX}{os.getpid()}-def456"
    other = tmp_path / "harness-accelerate-shim-not-a-pid"
    for folder in (dead, alive, other):
        folder.mkdir()
        (folder / "sitecustomize.py").write_text("# the shim\n")
    assert script_launch.remove_orphaned_shims(tmp_path) == [dead]
    assert not dead.exists() and alive.is_dir() and other.is_dir()
