"""Run the full CPU matrix N times in a row, natively and with the CPU capped at AVX2, and count
false failures: a cell whose status was not what the matrix declares (a failure nobody
declared, or a declared failure that passed) in any run.

    python benchmarks/matrix_repeat.py                   # 10 runs native, then 10 capped at AVX2
    python benchmarks/matrix_repeat.py --runs 3 --only avx2 -k "cpu2 and bf16"

The tolerances are matrix.toml's, whatever they are when this runs: the point is that a benign
rerun (another process, another run's thread timing, older kernels) never leaves them. Each run
is a fresh `python -m harness run` into its own report dir; a run whose exit status is neither
0 (as declared) nor 1 (some cell not as declared) stops the script. Prints one line per run
(wall time, statuses, every cell not as declared), then the totals; exits 1 on any false failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
from harness.layout.report_dir import ReportDir  # noqa: E402 - after the path is set

# The same cap the tests' older-CPU pass uses (noxfile.OLDER_CPU): torch's kernels, oneDNN and
# MKL held to AVX2 on a CPU that has more.
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "DNNL_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
MODES = {"native": {}, "avx2": AVX2}
AS_DECLARED = {"passed", "xfailed", "skipped"}


def one_run(report_dir: Path, keyword: str | None, extra_env: dict[str, str]) -> tuple[float, list[dict]]:
    cmd = [sys.executable, "-m", "harness", "run", "-q", "--report-dir", str(report_dir)]
    cmd += ["-k", keyword] if keyword else []
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, env={**os.environ, **extra_env})
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"run failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    report = json.loads(ReportDir(report_dir).report_json.read_text(encoding="utf-8"))
    return seconds, report["cells"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--only", choices=sorted(MODES), action="append")
    parser.add_argument("-k", dest="keyword", default=None, help="a -k selection (default: every cell)")
    args = parser.parse_args()
    false_failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="matrix-repeat-") as tmp:
        for mode in args.only or list(MODES):
            for run in range(1, args.runs + 1):
                seconds, cells = one_run(Path(tmp) / f"{mode}-{run}", args.keyword, MODES[mode])
                statuses = Counter(cell["status"] for cell in cells)
                wrong = [f"{cell['id']} {cell['status']}" for cell in cells
                         if cell["status"] not in AS_DECLARED]
                false_failures += [f"{mode} run {run}: {w}" for w in wrong]
                counts = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
                print(f"{mode} run {run}/{args.runs}: {seconds:.0f} s, {len(cells)} cells ({counts})"
                      + (f"; NOT AS DECLARED: {', '.join(wrong)}" if wrong else ""), flush=True)
    print(f"false failures: {len(false_failures)}")
    for line in false_failures:
        print(f"  {line}")
    return 1 if false_failures else 0


if __name__ == "__main__":
    sys.exit(main())
