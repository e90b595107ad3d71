"""The run's start-up and profile, kept in `startup.json` in the report dir by the runner and read
back by the CLI into report.json's `environment.startup`: how long each launch took before its
first cell (imports, process group, DeepSpeed's one-off op build, outside every cell's duration)
and where the whole run's time went (harness.run.profile)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.atomic_files import write_text_atomic

STARTUP_FILE = "startup.json"


def write_startup(report_dir: Path, launches: list[dict[str, object]], profile: dict[str, object]) -> None:
    summary = {**startup_summary(launches), "profile": profile}
    write_text_atomic(report_dir / STARTUP_FILE, json.dumps(summary, indent=1))


def startup_summary(launches: list[dict[str, object]]) -> dict[str, object]:
    """Start-up time of a run's launches: before each launch's first cell (imports, process
    group, DeepSpeed's one-off op build), outside every cell's duration."""
    total = sum(float(str(entry.get("startup_s") or 0.0)) for entry in launches)
    ops = [float(str(e["deepspeed_ops_s"])) for e in launches if e.get("deepspeed_ops_s") is not None]
    return {
        "launches": sum(1 for entry in launches if entry.get("launch") != "deepspeed-ops"),
        "total_s": round(total, 3),
        "deepspeed_ops_s": round(max(ops), 3) if ops else None,
        "per_launch": launches,
    }


def read_startup(report_dir: Path) -> dict[str, object] | None:
    """The run's start-up summary (None when it wrote none: every cell skipped, or an old run)."""
    try:
        return dict(json.loads((report_dir / STARTUP_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def startup_line(summary: dict[str, object] | None) -> str:
    """One sentence for the terminal and report.md."""
    if not summary:
        return ""
    ops = summary.get("deepspeed_ops_s")
    tail = f", of which DeepSpeed's CPU op build/load {ops:.1f} s" if isinstance(ops, float) else ""
    total = float(str(summary["total_s"]))
    return (f"start-up: {summary['launches']} launch(es), {total:.1f} s before their first cells{tail} "
            "(not counted in any cell's duration)")
