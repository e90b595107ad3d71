"""What a cell costs, to balance shards: a committed table, or a report passed to every shard.

Every shard computes the split on its own machine, so the split may depend only on what every
machine holds alike: the selection, the table below (in the repository), and a `--shard-costs`
report.json given to all of them. Never on this machine's own earlier runs: two machines with
different histories would compute different splits, and cells would run twice or never.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UsageError, explain
from harness.layout.report_dir import ReportDir
from harness.plan.cell import Cell, ResumeCell

# Mean seconds of one cell inside a running launch, by strategy (which fixes the process count
# on CPU), measured over the full CPU matrix on the 2-core development machine after the rank
# worker's gc.freeze. Only their ratios matter for the balance; a GPU matrix keeps the ratios.
STRATEGY_SECONDS: dict[str, float] = {
    "single": 0.09, "ddp": 0.19, "zero1": 0.37, "zero2": 0.28, "zero3": 0.57,
    # fsdp: measured later, in one cpu2 run beside ddp and zero3 (mean 1.35 s a cell against 0.36
    # and 1.68 s on a busier machine), scaled to this table by their two entries.
    "fsdp": 0.50,
}
# One launch's start-up (imports, process group, first initialize): 7-10 s on that machine. Every
# shard that takes cells of a launch shape pays it again, which is why shapes stay whole when
# that costs little balance (harness.shard.split).
STARTUP_S = 8.0
BUILT_IN = "built-in table"


@dataclass(frozen=True)
class CostModel:
    measured: Mapping[str, float] = field(default_factory=dict)  # cell id -> seconds (--shard-costs)
    startup_s: float = STARTUP_S
    scale: float = 1.0  # measured / table over the measured cells: the table at that machine's speed
    source: str = BUILT_IN  # "built-in table" or "sha256:<hex>" of the --shard-costs file

    def cell_seconds(self, cell: Cell) -> float:
        if cell.id in self.measured:
            return self.measured[cell.id]
        return self.scale * table_seconds(cell)


def table_seconds(cell: Cell) -> float:
    """The table's estimate; a resume cell runs its source and its destination."""
    seconds = STRATEGY_SECONDS[cell.strategy]
    if isinstance(cell, ResumeCell):
        source = cell.source_cell
        seconds += STRATEGY_SECONDS[source.strategy if source is not None else "single"]
    return seconds


def _refuse(path: Path, why: str) -> UsageError:
    return UsageError(explain(
        f"--shard-costs {str(path)!r}", why,
        f"the {ReportDir.REPORT_JSON} of an earlier `python -m harness run` or `report merge`, the same file "
        "for "
        "every shard",
        "pass such a file, or leave --shard-costs out to balance by the built-in table"))


def _measured(cells: Any) -> dict[str, float]:
    """Cell id -> mean duration over the entries that ran (a merged report may hold a cell once
    per environment); skipped cells and zero durations say nothing about cost."""
    seen: dict[str, list[float]] = {}
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict) or cell.get("status") == "skipped":
            continue
        seconds, cell_id = cell.get("duration_s"), cell.get("id")
        if isinstance(cell_id, str) and isinstance(seconds, int | float) and seconds > 0:
            seen.setdefault(cell_id, []).append(float(seconds))
    return {cell_id: sum(values) / len(values) for cell_id, values in sorted(seen.items())}


def _startup(data: dict[str, Any]) -> float:
    """Mean start-up per launch over every environment block that measured one."""
    blocks = [data.get("environment"), *(data.get("environments") or [])]
    launches, total = 0, 0.0
    for block in blocks:
        startup = block.get("startup") if isinstance(block, dict) else None
        if isinstance(startup, dict) and isinstance(startup.get("launches"), int) and startup["launches"] > 0:
            launches += startup["launches"]
            total += float(startup.get("total_s") or 0.0)
    return total / launches if launches and total > 0 else STARTUP_S


def load_costs(path: Path | None) -> CostModel:
    """The built-in table (no path), or the durations of an earlier run's report.json."""
    if path is None:
        return CostModel()
    try:
        raw = Path(path).read_bytes()
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise _refuse(path, f"it cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _refuse(path, "it is not a report (no JSON object)")
    measured = _measured(data.get("cells"))
    if not measured:
        raise _refuse(path, "it holds no cell that ran with a measured duration_s")
    table, took = 0.0, 0.0
    for cell_id, seconds in measured.items():
        try:
            table += table_seconds(Cell.from_id(cell_id))
        except ValueError:  # an id this harness cannot parse: no table estimate to compare
            continue
        took += seconds
    scale = took / table if table > 0 else 1.0
    return CostModel(measured, _startup(data), scale, "sha256:" + hashlib.sha256(raw).hexdigest())
