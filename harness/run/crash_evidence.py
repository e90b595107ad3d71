"""Evidence of how a launch ended, for the report: which rank died and its output's tail,
and the Python stacks every rank dumped on SIGUSR1 (a hang)."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

from harness.layout.launch_dir import LaunchDir
from harness.run.processes import rank_pids


def crash_detail(launch: LaunchDir, returncode: int | None, dead: dict[int, int], lines: int = 40) -> str:
    """Which rank died (from torchrun's failure summary) and the tail of that rank's output."""
    launcher = read_text(launch.launcher_log)
    logs = launch.logs()
    chosen = [p for p in logs if LaunchDir.rank_of(p) in dead] or logs
    who = ", ".join(f"rank {r} died ({describe_exit(c)})" for r, c in sorted(dead.items()))
    parts = [
        (who or "a rank died (which one, the launcher did not say)") + f"; launch exit code {returncode}"
    ]
    for path in chosen:
        tail = "\n".join(read_text(path).splitlines()[-lines:])
        parts.append(f"--- tail of {path.stem} output ---\n{tail}")
    parts.append("--- tail of launcher output ---\n" + "\n".join(launcher.splitlines()[-15:]))
    return "\n".join(parts)


def dead_ranks(launcher_log: str) -> dict[int, int]:
    """rank -> exit code of ranks that died on their own (torchrun's failure summary:
    "rank      : 1 (local_rank: 1)" then "exitcode  : 13 (pid: ...)")."""
    ranks = {}
    for match in re.finditer(r"rank\s*:\s*(\d+)\s*\(local_rank.*?\n\s*exitcode\s*:\s*(-?\d+)", launcher_log):
        if match.group(2) not in ("0", "-15"):  # -15: stopped by torchrun after another rank died
            ranks[int(match.group(1))] = int(match.group(2))
    return ranks


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def wait_for_stacks(launch: LaunchDir, wait_s: float) -> str:
    deadline = time.monotonic() + wait_s
    expected = len(rank_pids(launch))
    while time.monotonic() < deadline:
        files = launch.stacks()
        if expected and sum(1 for f in files if f.stat().st_size > 0) >= expected:
            time.sleep(0.2)  # let the dumps complete
            break
        time.sleep(0.1)
    files = launch.stacks()
    return "\n".join(f"--- {f.stem} ---\n{read_text(f)}" for f in files) or "(no rank wrote its stack)"
