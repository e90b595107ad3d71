"""What tolerance each kind of quantity needs: from a run's records and the goldens, the smallest
atol that passes at the entry's rtol (|run - golden| <= atol + rtol * |golden|), per precision,
strategy family and quantity kind (losses, eval, state_dict), with the cell and tensor that need
it. The numbers behind matrix.toml's [tolerances] entries and docs/sensitivity.md.

    python -m harness run --report-dir /tmp/all          # every cell this machine runs
    python benchmarks/tolerance_needs.py /tmp/all [more report dirs]

Only cells that passed count (an expected failure, e.g. per-rank batch norm, measures a bug).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from harness.calibrate.noise import atol_needed, relative_difference
from harness.golden.golden_store import load_golden
from harness.judge.cell_verdict import golden_task_of
from harness.layout.report_dir import ReportDir
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.plan.tolerances import FAMILIES
from harness.record.record_format import Record

Key = tuple[str, str, str]  # precision, family, quantity kind


def needs(report_dirs: list[Path]) -> tuple[dict[Key, tuple[float, str]], dict[Key, float]]:
    """Per (precision, family, kind): the worst atol needed at the rtol in force (and where), and
    the worst relative difference (the rtol that would pass with atol 0)."""
    matrix = load_matrix()
    worst: dict[Key, tuple[float, str]] = {}
    relative: dict[Key, float] = {}
    paths = []
    for report_dir in report_dirs:
        report = json.loads(ReportDir(report_dir).report_json.read_text(encoding="utf-8"))
        passed = {c["id"] for c in report["cells"] if c["status"] == "passed"}
        paths += [p for p in sorted(ReportDir(report_dir).records.glob("*.json")) if p.stem in passed]
    for path in paths:
        try:
            cell = Cell.from_id(path.stem)
        except ValueError:
            continue
        record = Record.load(path.with_suffix(""))
        golden = load_golden(golden_task_of(cell.task), cell.precision)
        tolerance = matrix.tolerance_for(cell.precision, cell.strategy)
        pairs = [("losses", "losses", torch.tensor(record.losses), torch.tensor(golden.losses))]
        pairs += [("eval", f"eval/{k}", record.eval_outputs[k], golden.eval_outputs[k])
                  for k in golden.eval_outputs if k in record.eval_outputs]
        pairs += [("state_dict", f"state_dict/{k}", record.state_dict[k], golden.state_dict[k])
                  for k in golden.state_dict if k in record.state_dict]
        for kind, name, mine, theirs in pairs:
            if mine.shape != theirs.shape or not mine.is_floating_point():
                continue
            rtol = tolerance.for_quantity(kind).rtol
            a, b = mine.double(), theirs.double()
            need = atol_needed(a, b, rtol) if a.numel() else 0.0
            key = (cell.precision, FAMILIES[cell.strategy], kind)
            if need >= worst.get(key, (-1.0, ""))[0]:
                worst[key] = (need, f"{cell.id} {name}")
            rel = relative_difference(a, b) if a.numel() else 0.0
            relative[key] = max(relative.get(key, 0.0), rel)
    return worst, relative


def main() -> None:
    matrix = load_matrix()
    worst, relative = needs([Path(a) for a in sys.argv[1:]])
    for (precision, family, kind), (need, where) in sorted(worst.items()):
        tol = matrix.tolerance_for(precision, "single" if family == "plain" else "zero1").for_quantity(kind)
        print(f"{precision}.{family}.{kind:<10} needs atol {need:.2e} at rtol {tol.rtol:g} "
              f"(in force: atol {tol.atol:g}; {need / tol.atol if tol.atol else float('inf'):.0%}); "
              f"worst relative diff {relative[(precision, family, kind)]:.2e}  {where}")


if __name__ == "__main__":
    main()
