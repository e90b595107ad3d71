"""The full CPU matrix of this checkout against the same run at another commit, side by side.

Both run in this venv, one after the other and alternating (`--rounds`), on the same machine in
one process, so the machine's speed that day cancels out of the ratio: a git worktree of the
other commit is made in a temporary folder, and each side runs `python -m harness run` from its
own tree (PYTHONPATH points at it). Prints each side's wall seconds per round, the medians, the
ratio, and this checkout's profile (where its time went; `--profile`) with its floor: the cells'
set-up and training, which no harness overhead can remove, against the run's wall clock.

    python benchmarks/matrix_vs_commit.py [--commit 2f421a6] [--rounds 1] [-- extra harness args]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.layout.report_dir import ReportDir
from harness.run.floor import run_floor

REPO = Path(__file__).resolve().parents[1]


def timed_run(tree: Path, report_dir: Path, extra: list[str]) -> float:
    environment = {**os.environ, "PYTHONPATH": str(tree), "CI": "1"}
    command = [sys.executable, "-m", "harness", "run", "--report-dir", str(report_dir), "--overwrite", "-q",
               *extra]
    start = time.monotonic()
    done = subprocess.run(command, cwd=tree, env=environment, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"{tree}: exit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return seconds


def floor_line(report_dir: Path) -> list[str]:
    """The profile of this checkout's last run and its floor (harness.run.floor: the core-seconds
    of its launches' start-up and cells' set-up and training over this machine's cores)."""
    startup = json.loads(ReportDir(report_dir).startup.read_text())
    profile = startup.get("profile", {})
    parts = profile.get("seconds", {})
    lines = [f"  {seconds:8.2f} s  {name}" for name, seconds in sorted(parts.items(), key=lambda p: -p[1])]
    floor = run_floor(startup.get("per_launch", []), os.cpu_count() or 1)
    wall = float(profile.get("wall_s", 0.0))
    lines.append(floor.line(wall) if floor else "floor: not recorded by this checkout's launches")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", default="2f421a6")
    parser.add_argument("--rounds", type=int, default=1)
    arguments, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    with tempfile.TemporaryDirectory(prefix="matrix-vs-commit-") as scratch:
        other = Path(scratch) / "other"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(other), arguments.commit],
                       check=True, capture_output=True)
        try:
            times: dict[str, list[float]] = {"this checkout": [], arguments.commit: []}
            for round_no in range(arguments.rounds):
                for name, tree in ((arguments.commit, other), ("this checkout", REPO)):
                    seconds = timed_run(tree, Path(scratch) / f"report-{len(times[name])}-{tree.name}", extra)
                    times[name].append(seconds)
                    print(f"round {round_no + 1}: {name}: {seconds:.1f} s", flush=True)
            this = statistics.median(times["this checkout"])
            before = statistics.median(times[arguments.commit])
            print(f"median: {arguments.commit} {before:.1f} s, this checkout {this:.1f} s: "
                  f"{before / this:.2f}x faster")
            last = Path(scratch) / f"report-{arguments.rounds - 1}-{REPO.name}"
            print("this checkout's last run, where the time went:")
            print("\n".join(floor_line(last)))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(other)],
                           check=False, capture_output=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
