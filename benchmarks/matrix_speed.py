"""Time the same selection of cells grouped (shared launches) and with --isolate.

    python benchmarks/matrix_speed.py                       # every CPU cell of matrix.toml
    python benchmarks/matrix_speed.py -k "cpu2 and fp32"    # a subset
    python benchmarks/matrix_speed.py --only grouped        # just the grouped time

Prints both wall times, the cell counts by status of each run (the two must agree: the same
cells, judged the same way), and the ratio isolate / grouped. The target (issue 6): >= 5x.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def timed_run(
    report_dir: Path, keyword: str, markexpr: str | None, matrix: str | None, isolate: bool
) -> float:
    cmd = [sys.executable, "-m", "harness", "run", "-q", "-k", keyword, "--report-dir", str(report_dir)]
    cmd += ["-m", markexpr] if markexpr else []
    cmd += ["--matrix", matrix] if matrix else []
    cmd += ["--isolate"] if isolate else []
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: some cell failed -- still a timing; anything else is not
        sys.exit(f"run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds


def summary(report_dir: Path) -> dict[str, int]:
    return dict(json.loads((report_dir / "report.json").read_text())["summary"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="keyword", default="cpu", help="cells to time (pytest -k grammar)")
    parser.add_argument("-m", dest="markexpr", default=None)
    parser.add_argument("--matrix", default=None)
    parser.add_argument("--only", choices=("grouped", "isolate"), default=None)
    args = parser.parse_args()
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="matrix_speed_") as tmp:
        for mode in ("grouped", "isolate"):
            if args.only and args.only != mode:
                continue
            report_dir = Path(tmp) / mode
            times[mode] = timed_run(report_dir, args.keyword, args.markexpr, args.matrix, mode == "isolate")
            counts = summary(report_dir)
            print(f"{mode:<8} {times[mode]:7.1f} s  {sum(counts.values())} cells  {counts}", flush=True)
    if len(times) == 2:
        print(f"ratio    {times['isolate'] / times['grouped']:.1f}x  (isolate / grouped; target >= 5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
