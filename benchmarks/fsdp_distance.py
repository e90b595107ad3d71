"""How far fsdp cells are from the goldens, next to ddp and zero3 of the same run, and what share
of each tolerance family ("plain", "zero") the fsdp cells use: the figures behind fsdp's family
in harness/plan/tolerances.py and the table of docs/fsdp.md ("FSDP in the matrix").

    python -m harness run -k "cpu2 and (ddp or zero3 or fsdp)" --report-dir REPORT_DIR
    python benchmarks/fsdp_distance.py REPORT_DIR

Per (task, precision): the max |run - golden| over losses, eval outputs and final weights of each
strategy's record (cells that trained; a cell that raised has none), and for fsdp the worst share
of the plain and the zero tolerance any comparison used (100% = at the edge; dtype failures and
the exact lr / loss-scale comparisons are left out: they are not a matter of tolerance).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from harness.golden.golden_store import load_golden
from harness.judge.cell_verdict import golden_task_of
from harness.judge.compare import compare_record
from harness.judge.output_dtype import expected_output_dtype
from harness.layout.report_dir import ReportDir
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.record.record_format import Record

STRATEGIES = ("ddp", "zero3", "fsdp")
FAMILIES = {"plain": "ddp", "zero": "zero3"}  # a strategy of each family, to look its tolerance up
TOLERANCED = ("losses", "eval/", "state_dict/")


def distances(report_dir: Path) -> tuple[dict[tuple[str, str], dict[str, float]],
                                          dict[tuple[str, str], dict[str, tuple[float, str]]]]:
    matrix = load_matrix()
    report = ReportDir(report_dir)
    statuses = {c["id"]: c["status"] for c in json.loads(report.report_json.read_text())["cells"]}
    diffs: dict[tuple[str, str], dict[str, float]] = {}
    shares: dict[tuple[str, str], dict[str, tuple[float, str]]] = {}
    for path in sorted(report.records.glob("*.json")):
        try:
            cell = Cell.from_id(path.stem)
        except ValueError:
            continue
        if cell.strategy not in STRATEGIES:
            continue
        record = Record.load(path.with_suffix(""))
        golden = load_golden(golden_task_of(cell.task), cell.precision, matrix.golden_dir)
        key = (cell.task, cell.precision)
        for family, example in FAMILIES.items():
            tolerance = matrix.tolerance_for(cell.precision, example)
            comparisons = [c for c in compare_record(record, golden, tolerance, expected_output_dtype(cell))
                           if c.quantity.startswith(TOLERANCED)]
            finite = [c for c in comparisons if math.isfinite(c.max_abs_diff)]
            worst = max(finite, key=lambda c: c.max_abs_diff, default=None)
            diffs.setdefault(key, {})[cell.strategy] = worst.max_abs_diff if worst else math.nan
            if cell.strategy == "fsdp":
                used = max(finite, key=lambda c: c.tolerance_used, default=None)
                status = statuses.get(cell.id, "?")
                shares.setdefault(key, {})[family] = (
                    used.tolerance_used if used else math.nan, f"{used.quantity if used else '-'} ({status})")
    return diffs, shares


def main() -> None:
    report_dir = Path(sys.argv[1])
    diffs, shares = distances(report_dir)
    print("| task | precision | ddp | zero3 | fsdp | fsdp share of plain | fsdp share of zero "
          "| worst quantity |")
    print("|---|---|---|---|---|---|---|---|")
    for (task, precision), row in sorted(diffs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        share = shares.get((task, precision), {})
        plain, zero = share.get("plain", (math.nan, "")), share.get("zero", (math.nan, ""))
        cols = " | ".join(f"{row[s]:.2e}" if s in row else "raised" for s in STRATEGIES)
        print(f"| {task} | {precision} | {cols} | {plain[0]:.0%} | {zero[0]:.0%} | {plain[1] or zero[1]} |"
              if share else f"| {task} | {precision} | {cols} | - | - | fsdp raised |")


if __name__ == "__main__":
    main()
