"""The run's start-up and profile: how long each launch took before its first cell (imports,
process group, DeepSpeed's one-off op build, outside every cell's duration) and where the whole
run's time went (harness.run.profile). The runner returns it in its RunOutcome, the CLI puts it
into report.json's `environment.startup`, and `startup.json` in the report dir keeps a copy for
readers of the folder (docs/reading-the-report.md names it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from harness.atomic_files import write_text_atomic
from harness.layout.report_dir import ReportDir

OPS_LAUNCH = "deepspeed-ops"  # harness.run.deepspeed_ops's entry: a build, not a launch of cells


@dataclass
class StartupSummary:
    """Start-up time of a run's launches and the run's profile. `per_launch` keeps each entry as
    report.json has it: a launch's and the op build's entries carry different keys."""

    per_launch: list[dict[str, object]]
    profile: dict[str, object] = field(default_factory=dict)

    @property
    def launches(self) -> int:
        return sum(1 for entry in self.per_launch if entry.get("launch") != OPS_LAUNCH)

    @property
    def total_s(self) -> float:
        return round(sum(float(str(entry.get("startup_s") or 0.0)) for entry in self.per_launch), 3)

    @property
    def deepspeed_ops_s(self) -> float | None:
        ops = [float(str(e["deepspeed_ops_s"])) for e in self.per_launch
               if e.get("deepspeed_ops_s") is not None]
        return round(max(ops), 3) if ops else None

    def to_json(self) -> dict[str, Any]:
        """report.json's `environment.startup` (and startup.json), keys in their documented order."""
        return {"launches": self.launches, "total_s": self.total_s, "deepspeed_ops_s": self.deepspeed_ops_s,
                "per_launch": self.per_launch, "profile": self.profile}

    def write(self, report_dir: ReportDir) -> None:
        write_text_atomic(report_dir.startup, json.dumps(self.to_json(), indent=1))

    def line(self) -> str:
        """One sentence for the terminal."""
        ops = self.deepspeed_ops_s
        tail = f", of which DeepSpeed's CPU op build/load {ops:.1f} s" if ops is not None else ""
        return (f"start-up: {self.launches} launch(es), {self.total_s:.1f} s before their first cells{tail} "
                "(not counted in any cell's duration)")
