"""`accelerate-core launch` as a process supervisor: environment, exit codes, no leftovers, signals.

Real runs: the launcher is a subprocess, several ranks go through torch.distributed.run. Every
process of a run carries a unique marker variable, so "nothing is left" is checked over all
processes of the machine with psutil, not only over the pids the scripts wrote down.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from accelerate_core.commands.launch import SCRATCH_PREFIX, remove_orphaned_scratch
from tests.accelerate_core.commands.cli_helpers import CLI, REPO_ROOT, SCRIPTS, cli_environ, describe, run_cli
from tests.run_if import run_if

psutil = pytest.importorskip("psutil")


def processes_with_marker(marker: str) -> list[Any]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get("H3_RUN_MARKER") == marker:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def kill_marked(marker: str) -> None:
    """Test hygiene: whatever the outcome, no process of this test's run outlives it."""
    for proc in processes_with_marker(marker):
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for_files(directory: Path, names: list[str], launcher: subprocess.Popen[Any],
                   timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all((directory / n).exists() for n in names):
        if launcher.poll() is not None:
            out, _ = launcher.communicate()
            pytest.fail(f"launch ended early with {launcher.returncode}:\n{out}")
        if time.monotonic() > deadline:
            launcher.kill()
            pytest.fail(f"ranks did not start within {timeout}s")
        time.sleep(0.05)


def test_one_process_runs_directly_with_the_torchrun_variables(tmp_path: Path) -> None:
    env = cli_environ(tmp_path / "cfg")
    result = run_cli(["launch", "--backend", "single", "--mixed_precision", "bf16",
                      str(SCRIPTS / "show_env.py"), str(tmp_path / "out"), "7"], env)
    assert result.returncode == 7, describe(result)  # the script's own exit code
    seen = json.loads((tmp_path / "out.rank0.json").read_text())
    assert seen["argv"] == [str(tmp_path / "out"), "7"]
    env_seen = seen["env"]
    assert {k: env_seen[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")} == {
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    assert 0 < int(env_seen["MASTER_PORT"]) < 65536
    # Only what was said reaches the script: no config file, two flags (backend, precision),
    # with where each came from (ACCELERATE_CORE_SOURCES, for conflict messages).
    launcher_vars = {k: v for k, v in env_seen.items() if k.startswith("ACCELERATE_CORE_")
                     and k not in ("ACCELERATE_CORE_CONFIG_FILE", "ACCELERATE_CORE_SOURCES")}
    assert launcher_vars == {"ACCELERATE_CORE_BACKEND": "single", "ACCELERATE_CORE_MIXED_PRECISION": "bf16"}
    sources = json.loads(env_seen["ACCELERATE_CORE_SOURCES"])
    assert {k: v["where"] for k, v in sources.items()} == {
        "backend": "--backend single", "mixed_precision": "--mixed-precision bf16"}


def test_stale_launcher_variables_in_the_shell_do_not_leak_into_the_run(tmp_path: Path) -> None:
    env = cli_environ(tmp_path / "cfg", {"ACCELERATE_CORE_ZERO_STAGE": "3"})
    result = run_cli(["launch", str(SCRIPTS / "show_env.py"), str(tmp_path / "out")], env)
    assert result.returncode == 0, describe(result)
    env_seen = json.loads((tmp_path / "out.rank0.json").read_text())["env"]
    # Nothing was set (the config file sets nothing, no flags), so no launcher variable at all:
    # the stale one is removed, and the unset backend is left to the connector (single here).
    launcher_vars = {k for k in env_seen
                     if k.startswith("ACCELERATE_CORE_") and k != "ACCELERATE_CORE_CONFIG_FILE"}
    assert launcher_vars == set(), env_seen


@pytest.mark.ddp
def test_two_processes_get_ranks_and_the_launch_settings(tmp_path: Path) -> None:
    env = cli_environ(tmp_path / "cfg")
    result = run_cli(["launch", "--cpu", "--num-processes", "2", "--backend", "ddp",
                      str(SCRIPTS / "show_env.py"), str(tmp_path / "out")], env, timeout=120)
    assert result.returncode == 0, describe(result)
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"out.rank{rank}.json").read_text())["env"]
        assert (seen["RANK"], seen["WORLD_SIZE"]) == (str(rank), "2")
        assert seen["MASTER_ADDR"] in ("localhost", "127.0.0.1")  # the loopback rendezvous
        assert seen["ACCELERATE_CORE_BACKEND"] == "ddp" and seen["ACCELERATE_CORE_CPU"] == "1"


@pytest.mark.ddp
@pytest.mark.slow
def test_a_failing_rank_stops_the_run_with_its_exit_code_and_leaves_nothing(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    env = cli_environ(tmp_path / "cfg", {"H3_RUN_MARKER": marker})
    log = tmp_path / "launch.log"
    start = time.monotonic()
    # Output to a file, not a pipe: a leftover process holding the pipe must not hide the exit.
    with log.open("w") as sink:
        launcher = subprocess.Popen(
            [*CLI, "launch", "--cpu", "--num-processes", "2", "--backend", "ddp",
             str(SCRIPTS / "fail_rank1.py"), str(tmp_path)],
            env=env, cwd=str(REPO_ROOT), stdout=sink, stderr=subprocess.STDOUT)
        try:
            launcher.wait(timeout=120)
        finally:
            elapsed = time.monotonic() - start
            if launcher.poll() is None:
                launcher.kill()
            leftovers = processes_with_marker(marker)
            kill_marked(marker)
    out = log.read_text()
    pids = {p.stem: int(p.read_text()) for p in tmp_path.glob("*.pid")}
    assert set(pids) == {"rank0", "rank1", "grandchild"}, out
    assert launcher.returncode == 3, out  # rank 1's own exit code, not torchrun's 1
    assert "exitcode  : 3" in out  # torchrun's failure summary is shown
    # Rank 0 would sleep 600 s: the launch ended because rank 1 failed. (Start-up of two
    # processes is a few seconds here; the bound leaves room for a loaded machine.)
    assert elapsed < 60, f"took {elapsed:.1f}s"
    assert leftovers == []
    assert not [name for name, pid in pids.items() if alive(pid)]


@pytest.mark.ddp
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_or_sigterm_to_launch_stops_every_rank(tmp_path: Path, sig: signal.Signals) -> None:
    marker = uuid.uuid4().hex
    env = cli_environ(tmp_path / "cfg", {"H3_RUN_MARKER": marker})
    launcher = subprocess.Popen(
        [*CLI, "launch", "--cpu", "--num-processes", "2", "--backend", "ddp",
         str(SCRIPTS / "sleep_ranks.py"), str(tmp_path)],
        env=env, cwd=str(REPO_ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_files(tmp_path, ["rank0.pid", "rank1.pid"], launcher, timeout=90)
        sent = time.monotonic()
        launcher.send_signal(sig)
        out, _ = launcher.communicate(timeout=60)
        stopped_in = time.monotonic() - sent
    finally:
        if launcher.poll() is None:
            launcher.kill()
        leftovers = processes_with_marker(marker)
        kill_marked(marker)
    assert leftovers == []
    assert launcher.returncode == 128 + int(sig), out
    assert stopped_in < 40, f"took {stopped_in:.1f}s"  # torchrun's own grace period is 30 s
    pids = [int(p.read_text()) for p in tmp_path.glob("rank*.pid")]
    assert not [pid for pid in pids if alive(pid)]


def _signal_state(pid: int) -> str:
    """Alive or not, and the signals it blocks, ignores and catches (hex masks, /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return f"{pid} is gone"
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    masks = ", ".join(f"{name} {fields.get(name, '?').strip()}" for name in ("SigBlk", "SigIgn", "SigCgt"))
    return f"{pid} {fields.get('State', '?').strip()}, {masks}"


def test_one_process_run_is_stopped_by_sigint_too(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    env = cli_environ(tmp_path / "cfg", {"H3_RUN_MARKER": marker})
    launcher = subprocess.Popen([*CLI, "launch", str(SCRIPTS / "sleep_ranks.py"), str(tmp_path)],
                                env=env, cwd=str(REPO_ROOT), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_files(tmp_path, ["rank0.pid"], launcher, timeout=60)
        launcher.send_signal(signal.SIGINT)
        try:
            out, _ = launcher.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # seen once in CI: say which process kept running and why
            rank = int((tmp_path / "rank0.pid").read_text())
            pytest.fail(f"not stopped within 30 s: launcher {_signal_state(launcher.pid)}; "
                        f"rank 0 {_signal_state(rank)}")
    finally:
        if launcher.poll() is None:
            launcher.kill()
        leftovers = processes_with_marker(marker)
        kill_marked(marker)
    assert leftovers == []
    assert launcher.returncode == 130, out
    assert not alive(int((tmp_path / "rank0.pid").read_text()))


@pytest.mark.ddp
@pytest.mark.slow
@run_if(linux=True, why="parent-death signals are Linux-only")
def test_a_launcher_killed_outright_still_takes_every_rank_down(tmp_path: Path) -> None:
    # SIGKILL cannot be handled: the launcher armed torchrun with a parent-death signal (Linux).
    marker = uuid.uuid4().hex
    env = cli_environ(tmp_path / "cfg", {"H3_RUN_MARKER": marker})
    launcher = subprocess.Popen(
        [*CLI, "launch", "--cpu", "--num-processes", "2", "--backend", "ddp",
         str(SCRIPTS / "sleep_ranks.py"), str(tmp_path)],
        env=env, cwd=str(REPO_ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_files(tmp_path, ["rank0.pid", "rank1.pid"], launcher, timeout=90)
        launcher.kill()
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 40  # torchrun's own grace period for its ranks is 30 s
        while processes_with_marker(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        leftovers = processes_with_marker(marker)
    finally:
        kill_marked(marker)
    assert leftovers == []
    # Its scratch folder outlived it (nothing runs after SIGKILL); the next launch removes it.
    orphans = list(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}{launcher.pid}-*"))
    assert orphans, "the killed launcher left no scratch folder: this test no longer tests the sweep"
    assert set(orphans) <= set(remove_orphaned_scratch())
    assert not any(path.exists() for path in orphans)


@pytest.mark.ddp
@pytest.mark.slow
def test_two_machines_on_loopback_meet_through_the_multi_node_flags(tmp_path: Path) -> None:
    from accelerate_core.commands.launch import free_port

    port = str(free_port())
    env = cli_environ(tmp_path / "cfg")
    machines = [
        subprocess.Popen(
            [*CLI, "launch", "--cpu", "--backend", "ddp", "--num-processes", "2", "--num-machines", "2",
             "--machine-rank", str(rank), "--main-process-ip", "127.0.0.1", "--main-process-port", port,
             str(SCRIPTS / "show_env.py"), str(tmp_path / "out")],
            env=env, cwd=str(REPO_ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in (0, 1)
    ]
    outputs = []
    try:
        for machine in machines:
            outputs.append(machine.communicate(timeout=120)[0])
    finally:
        for machine in machines:
            if machine.poll() is None:
                machine.kill()
    assert [m.returncode for m in machines] == [0, 0], "\n".join(outputs)
    # Global ranks 0 and 1 of one world of 2 were handed out across the two agents: they met at
    # the rendezvous the flags named. (The ranks' own process group is not set up here: with a
    # gloo group, about one run in five on this shared machine ended with rank 0 aborting in a
    # TCPStore call during shutdown, inside torch's elastic agent/store, not the launcher.)
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"out.rank{rank}.json").read_text())["env"]
        assert (seen["RANK"], seen["WORLD_SIZE"], seen["LOCAL_RANK"]) == (str(rank), "2", "0")
        assert (seen["MASTER_ADDR"], seen["MASTER_PORT"]) == ("127.0.0.1", port)
