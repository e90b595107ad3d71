"""report.json: the machine-readable report (schema in docs/reading-the-report.md; keep it stable).

{"summary": {status: count}, "environment": {...}, "cells": [{id, task, device, strategy,
processes, precision, status, reason, duration_s, comparisons: [...]}, ...]} plus extra keys
(schema_version, ok, total, near_misses, and per cell detail, emulated, environment, extra). A
merged report (`python -m harness report merge`) adds "environments" and "cross_environment".
New keys are only ever added: programs read the existing ones by name.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from harness.judge.outcome import CellResult
from harness.judge.record_change_summary import record_changes_summary
from harness.report.merged_report import MergedReport
from harness.report.near_miss import near_misses_json
from harness.report.summary import counts, ok

SCHEMA_VERSION = 1


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf; a NaN loss (a real outcome) becomes the string "nan" and so on."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def report_dict(results: Sequence[CellResult], environment: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "ok": ok(results),
        "total": len(results),
        "summary": counts(results),
        "environment": _finite(environment),
        "cells": [_finite(result.to_json()) for result in results],
        # Passed cells at 80% or more of a tolerance (harness/report/near_miss.py).
        "near_misses": _finite(near_misses_json(results)),
    } | _record_changes(results)


def _record_changes(results: Sequence[CellResult]) -> dict[str, Any]:
    """"record_changes" when the run compared records (--compare-records): docs/versions.md."""
    summary = record_changes_summary(results)
    return {} if summary is None else {"record_changes": _finite(summary)}


def render_json(results: Sequence[CellResult], environment: dict[str, Any]) -> str:
    return json.dumps(report_dict(results, environment), indent=2, allow_nan=False) + "\n"


def merged_report_dict(merged: MergedReport) -> dict[str, Any]:
    """The same top-level keys as one environment's report.json (its "environment" names what was
    merged), plus "environments" (each input's environment block, in the order given) and
    "cross_environment" (each comparison of a non-DeepSpeed cell's records). Every cell keeps its
    own "environment"; "ok" is the merge's verdict (no unexpected failure, no differing record)."""
    data = report_dict(merged.results, merged.environment)
    data["ok"] = merged.ok
    data["environments"] = [_finite(report.environment) for report in merged.inputs]
    data["cross_environment"] = [_finite(check.to_json()) for check in merged.cross]
    if merged.versions:  # the version sweep (docs/versions.md)
        data["versions"] = [_finite(row.to_json()) for row in merged.versions]
        data["behaviours"] = merged.behaviours
    return data


def render_merged_json(merged: MergedReport) -> str:
    return json.dumps(merged_report_dict(merged), indent=2, allow_nan=False) + "\n"
