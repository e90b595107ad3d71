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
    """The profile of this checkout's last run and its floor (its cells' set-up and training,
    spread over the launches that run side by side, plus the longest start-up)."""
    startup = json.loads(ReportDir(report_dir).startup.read_text())
    profile = startup.get("profile", {})
    parts = profile.get("seconds", {})
    lines = [f"  {seconds:8.2f} s  {name}" for name, seconds in sorted(parts.items(), key=lambda p: -p[1])]
    launches = startup.get("per_launch", [])
    longest_startup = max((float(e.get("startup_s") or 0.0) for e in launches), default=0.0)
    parallel = max(1, min(2, len(launches)))
    floor = longest_startup + (parts.get("cell setup", 0.0) + parts.get("cell training", 0.0)) / parallel
    wall = float(profile.get("wall_s", 0.0))
    lines.append(f"floor: {floor:.1f} s (longest launch start-up {longest_startup:.1f} s + the cells' set-up "
                 f"and training over {parallel} side-by-side launches); run wall {wall:.1f} s, "
                 f"{wall / floor if floor else float('nan'):.2f}x the floor")
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
