"""The sweep's two tables, read from the report dirs of the version environments:

- versions: environment x (torch, deepspeed, status, reason, cells passed / failed, wall time);
- behaviours: DeepSpeed behaviour x environment (present / fixed / other), with the core's gate.

Status of an environment: "supported" (the core accepts the release and every cell passed),
"not supported" (install error, import error, or refused by the core; for a refused release run
anyway, the first failing cell is added), "failing" (inside the declared range, yet a cell failed:
a regression), "works outside the range" (refused by the core, yet every cell passed: a
candidate for widening the range).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.judge.outcome import CellResult, Status
from harness.judge.record_change_summary import record_changes_summary, summary_line
from harness.layout.report_dir import ReportDir
from harness.versions.behaviours import BEHAVIOURS, read_behaviours
from harness.versions.status import read_status


@dataclass
class VersionRow:
    environment: str
    torch: str
    deepspeed: str
    status: str
    reason: str
    passed: int
    failed: int  # failed, error, crashed, timeout, xpassed
    skipped: int
    xfailed: int = 0  # failed as matrix.toml declares (e.g. batchnorm on 2 ranks): not a finding
    seconds: dict[str, float] = field(default_factory=dict)  # phase -> wall seconds
    numbers: str = ""  # --compare-records: "against X: n bit-identical, ..." ("" when not compared)
    accelerate: str = ""  # Hugging Face Accelerate's release, for an environment of its cells ("" = none)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _first_failure(results: list[CellResult]) -> CellResult | None:
    return next((r for r in results if Status(r.status).is_unexpected_failure), None)


def _short(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_times(report_dir: Path) -> dict[str, float]:
    try:
        data = json.loads(ReportDir(Path(report_dir)).sweep_times.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def version_row(name: str, report_dir: Path, environment: dict[str, Any],
                results: list[CellResult]) -> VersionRow | None:
    """The row of one report dir; None when it is not a sweep environment (no version_status.json)."""
    status = read_status(report_dir)
    if status is None:
        return None
    counted = [Status(r.status) for r in results]
    passed = sum(s is Status.PASSED for s in counted)
    xfailed = sum(s is Status.XFAILED for s in counted)
    failed = sum(s.is_unexpected_failure for s in counted)
    skipped = sum(s is Status.SKIPPED for s in counted)
    first = _first_failure(results)
    first_text = (f"first failing cell {first.id}: {first.status.value}: {_short(first.reason)}"
                  if first else "")
    # The core's refusal up to its "Valid:" part (the range and the fix are the table's own columns).
    reason = str(status.get("reason", "")).split(". Valid:")[0]
    if status.get("stage") in ("install", "import", "op build"):
        verdict = "not supported"
    elif not status.get("supported"):
        ran = bool(counted) and failed + passed > 0
        if ran and failed == 0:
            verdict, reason = "works outside the range", f"{reason}; yet {_as_expected(passed, xfailed)}"
        else:
            verdict = "not supported"
            reason = f"{reason}; run anyway: {first_text}" if first_text else reason
    elif failed or not counted:
        verdict, reason = "failing", first_text or "no cell ran"
    else:
        verdict, reason = "supported", _as_expected(passed, xfailed)
    changes = record_changes_summary(results)
    return VersionRow(name, str(status.get("torch") or environment.get("torch", "")),
                      str(status.get("deepspeed") or environment.get("deepspeed", "")), verdict, reason,
                      passed, failed, skipped, xfailed, read_times(report_dir),
                      summary_line(changes) if changes else "", _accelerate(environment, results))


def _accelerate(environment: dict[str, Any], results: list[CellResult]) -> str:
    """The accelerate release of report.json's environment, where the cells were Accelerate's."""
    release = str(environment.get("accelerate") or "")
    ran = any(r.cell.implementation == "accelerate" for r in results)
    return release if ran and release[:1].isdigit() else ""


def _as_expected(passed: int, xfailed: int) -> str:
    declared = f", {xfailed} failed as matrix.toml declares" if xfailed else ""
    return f"every cell as expected: {passed} passed{declared}"


def behaviour_columns(report_dirs: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """environment -> behaviours.json of it (environments without one left out)."""
    found = {name: read_behaviours(directory) for name, directory in report_dirs.items()}
    return {name: data for name, data in found.items() if data is not None}


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _seconds(row: VersionRow) -> str:
    if not row.seconds:
        return "?"
    parts = ", ".join(f"{k} {v:.0f}" for k, v in row.seconds.items())
    return f"{sum(row.seconds.values()):.0f} ({parts})"


def _accelerate_note(row: VersionRow) -> str:
    return f" (accelerate {row.accelerate})" if row.accelerate else ""


def versions_markdown(rows: list[VersionRow]) -> list[str]:
    lines = ["| environment | torch | deepspeed | status | passed | declared failures | failed "
             "| wall s (phases) | numbers | reason |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| `{r.environment}`{_accelerate_note(r)} | {r.torch} | {r.deepspeed} | {r.status} "
              f"| {r.passed} | {r.xfailed} | {r.failed} | {_seconds(r)} | {_cell(r.numbers)} "
              f"| {_cell(r.reason)} |" for r in rows]
    return lines


def _mark(entry: dict[str, Any]) -> str:
    text = str(entry.get("verdict", "?"))
    gate = entry.get("gate_on")
    if gate is not None:
        text += f", patch {'on' if gate else 'off'}"
    if entry.get("gate_agrees") is False:
        text += " ❌ gate disagrees"
    return text


def behaviours_markdown(columns: dict[str, dict[str, Any]]) -> list[str]:
    if not columns:
        return ["No environment probed the DeepSpeed behaviours (`python -m harness versions probe`)."]
    names = list(columns)
    header = "| behaviour | " + " | ".join(f"`{n}` ({columns[n]['versions'].get('deepspeed', '?')})"
                                           for n in names) + " |"
    lines = [header, "|---|" + "---|" * len(names)]
    for behaviour in BEHAVIOURS:
        cells = []
        for name in names:
            found = columns[name]["behaviours"]
            entry = next((b for b in found if b.get("behaviour") == behaviour.key), None)
            if entry is None:
                cells.append(f"not run ({_cell(columns[name].get('error') or 'no entry')[:120]})")
            else:
                cells.append(_cell(_mark(entry)))
        lines.append(f"| {behaviour.key}: {behaviour.title} | " + " | ".join(cells) + " |")
    return lines
