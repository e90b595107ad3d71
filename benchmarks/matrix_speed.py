"""Time one selection of cells three ways: all passing (shared launches), a third failing, and
with --isolate.

    python benchmarks/matrix_speed.py                        # every CPU cell: grouped and failing
    python benchmarks/matrix_speed.py -k "cpu2 and fp32"     # a subset
    python benchmarks/matrix_speed.py --only isolate         # one mode (grouped, failing, isolate)

`failing` runs the same cells against a copy of the matrix whose bf16 tolerances are zero: every
bf16 cell (a third of them: fp32, fp16, bf16) leaves tolerance, by a margin of rounding, with no
other change to what runs. It measures what failures cost: a failing cell must not cost the
rest of its launch group a fresh launch, only its own confirmation (harness.run.confirm: one
rerun launch per launch shape, then alone for any cell whose rerun did not reproduce).

Prints each mode's wall time and the cell counts by status (grouped and isolate must agree: the
same cells, judged the same way), then the ratios. Targets: failing / grouped <= 1.5x (issue 16:
it was about 9x when every failure relaunched the rest of its group); isolate / grouped >= 5x
(issue 6).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
from harness.layout.report_dir import ReportDir  # noqa: E402
from harness.paths import GOLDEN_DIR, MATRIX_PATH  # noqa: E402 - after the path is set

MODES = ("grouped", "failing", "isolate")


def timed_run(report_dir: Path, keyword: str, markexpr: str | None, matrix: Path, isolate: bool) -> float:
    cmd = [sys.executable, "-m", "harness", "run", "-q", "-k", keyword, "--report-dir", str(report_dir)]
    cmd += ["-m", markexpr] if markexpr else []
    cmd += ["--matrix", str(matrix)]
    cmd += ["--isolate"] if isolate else []
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: some cell failed -- still a timing; anything else is not
        sys.exit(f"run failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return seconds


def bf16_failing_matrix(source: Path, folder: Path) -> Path:
    """A copy of `source` whose [tolerances.bf16...] entries are rtol = atol = 0, with the same
    goldens (a matrix's goldens are the `golden/` beside it)."""
    section = ""
    lines = []
    for line in source.read_text(encoding="utf-8").splitlines():
        header = re.match(r"\s*\[+([^\]]+)\]+", line)
        if header:
            section = header.group(1).strip()
        if section.startswith("tolerances.bf16") and re.match(r"\s*(rtol|atol)\s*=", line):
            line = re.sub(r"=.*", "= 0.0", line)
        lines.append(line)
    folder.mkdir(parents=True, exist_ok=True)
    matrix = folder / "matrix.toml"
    matrix.write_text("\n".join(lines) + "\n", encoding="utf-8")
    golden = source.parent / "golden" if source.resolve() != MATRIX_PATH.resolve() else GOLDEN_DIR
    (folder / "golden").symlink_to(golden.resolve(), target_is_directory=True)
    return matrix


def read_report(report_dir: Path) -> dict[str, object]:
    return dict(json.loads(ReportDir(report_dir).report_json.read_text()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="keyword", default="cpu", help="cells to time (pytest -k grammar)")
    parser.add_argument("-m", dest="markexpr", default=None)
    parser.add_argument("--matrix", type=Path, default=MATRIX_PATH)
    parser.add_argument("--only", choices=MODES, action="append", default=None,
                        help="run only this mode (repeatable); default: grouped and failing")
    args = parser.parse_args()
    modes = args.only or ["grouped", "failing"]
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="matrix_speed_") as tmp:
        failing_matrix = bf16_failing_matrix(args.matrix, Path(tmp) / "failing_matrix")
        for mode in MODES:
            if mode not in modes:
                continue
            report_dir = Path(tmp) / mode
            matrix = failing_matrix if mode == "failing" else args.matrix
            times[mode] = timed_run(report_dir, args.keyword, args.markexpr, matrix, mode == "isolate")
            report = read_report(report_dir)
            counts = {k: v for k, v in dict(report["summary"]).items() if v}  # type: ignore[call-overload]
            launches = len(list(ReportDir(report_dir).launches.iterdir()))
            startup = dict(report["environment"]).get("startup") or {}  # type: ignore[call-overload]
            print(f"{mode:<8} {times[mode]:7.1f} s  {report['total']} cells  {launches} launches  "
                  f"start-up {startup.get('total_s', '?')} s  {counts}", flush=True)
    if "grouped" in times and "failing" in times:
        print(f"ratio    {times['failing'] / times['grouped']:.2f}x  (failing / grouped; target <= 1.5x)")
    if "grouped" in times and "isolate" in times:
        print(f"ratio    {times['isolate'] / times['grouped']:.1f}x  (isolate / grouped; target >= 5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
