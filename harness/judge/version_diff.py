"""How a cell's numbers changed against another environment's record of the same cell: the
cross-version view of `--compare-records` (docs/versions.md).

  bit-identical     every tensor equal bit for bit, the same steps skipped
  within tolerance  some differ, all inside the cell's tolerance of the matrix (atol + rtol*|other|)
  diverged          a tensor outside that tolerance, a tensor only one side has, or other skips

Informative: the golden still decides whether the cell passes. It makes an upgrade that changes
numerics visible although every cell still passes its golden. (The bit-for-bit rule for
non-DeepSpeed cells, `harness.judge.cell_verdict.cross_environment`, applies between environments of one
torch release only: see `same_torch`.)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import torch

from harness.layout.report_dir import ReportDir
from harness.plan.tolerances import Tolerance
from harness.record.record_format import Record

Change = Literal["bit-identical", "within tolerance", "diverged", "not compared"]
CHANGES: tuple[Change, ...] = ("bit-identical", "within tolerance", "diverged", "not compared")


def _environment(report_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads(ReportDir(report_dir).report_json.read_text(encoding="utf-8"))
        environment = data.get("environment", {})
        return environment if isinstance(environment, dict) else {}
    except (OSError, ValueError, AttributeError):
        return {}


def other_environment(report_dir: Path) -> tuple[str, str]:
    """(name, torch version) of the environment whose report dir is compared with."""
    environment = _environment(report_dir)
    return str(environment.get("name", "")), str(environment.get("torch", ""))


def same_torch(report_dir: Path, torch_version: str) -> bool:
    """Whether the compared environment ran this torch release (unknown counts as the same, so
    the stricter bit-for-bit rule stays on)."""
    _, theirs = other_environment(report_dir)
    return not theirs or theirs == torch_version


def record_change(record: Record, other_stem: Path, tolerance: Tolerance, other_name: str) -> dict[str, Any]:
    """{"against", "change", "max_abs_diff", "first_difference", "tensors"} for report.json."""
    try:
        other = Record.load(other_stem)
    except Exception as exc:  # missing (the cell did not run there) or unreadable: say which
        return {"against": other_name, "change": "not compared", "max_abs_diff": math.nan,
                "first_difference": None, "tensors": 0, "note": str(exc).splitlines()[0][:200]}
    mine, theirs = record.tensors(), other.tensors()
    worst = 0.0
    changed: list[str] = []
    outside: list[str] = []
    for key in sorted(mine.keys() | theirs.keys()):
        a, b = mine.get(key), theirs.get(key)
        if a is None or b is None or a.shape != b.shape:
            changed.append(key)
            outside.append(key)
            continue
        if torch.equal(a, b):
            continue
        changed.append(key)
        a64, b64 = a.double(), b.double()
        diff = (a64 - b64).abs()
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
        if not bool((diff <= tolerance.atol + tolerance.rtol * b64.abs()).all()):
            outside.append(key)
    if record.skipped_steps != other.skipped_steps:
        changed.append("skipped_steps")
        outside.append("skipped_steps")
    change: Change = "diverged" if outside else ("within tolerance" if changed else "bit-identical")
    first = next(iter(outside or changed), None)
    return {"against": other_name, "change": change, "max_abs_diff": worst, "first_difference": first,
            "tensors": len(mine), "changed_tensors": len(changed)}
