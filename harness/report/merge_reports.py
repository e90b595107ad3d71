"""`python -m harness report merge DIR... --out DIR`: the reports of several environments as one.

Each DIR is the --report-dir of a `python -m harness run` in one environment (report.json names
it in "environment"."name"; its records, if kept, are under DIR/records/). The merge reads every
report.json, compares the records of each non-DeepSpeed cell that ran in more than one
environment (`harness.judge.cell_verdict.cross_environment`: bit for bit, since installing deepspeed must
not change what DDP or a single process computes), and writes one report: report.json,
junit.xml, report.md and report.html with one grid row per (environment, task).

The shards of one environment (`python -m harness run --shard K/N`) are joined into that
environment first (harness.shard.combine: every shard once, of one run; cells in the selection's
order; each cell's record read from its shard's dir), so it merges as the unsharded run would.

Its verdict (`MergedReport.ok`): no input cell failed unexpectedly and no compared record differs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.errors import ReportDirError, UsageError, explain
from harness.judge.outcome import CellResult, Status
from harness.layout.report_dir import RECORD_SUFFIXES, ReportDir
from harness.report.merged_report import CrossCheck, EnvironmentReport, MergedReport
from harness.report.writer import write_merged_reports

_VALID_DIR = f"the --report-dir of a finished `python -m harness run` (it holds {ReportDir.REPORT_JSON})"


def _refuse(directory: Path, why: str, fix: str) -> ReportDirError:
    return ReportDirError(explain(f"report dir {str(directory)!r}", why, _VALID_DIR, fix))


def read_report_dir(directory: Path) -> EnvironmentReport:
    """The environment and cells of one report dir; ReportDirError (exit 2) when it has none."""
    directory = Path(directory)
    path = ReportDir(directory).report_json
    run_first = (
        "run `python -m harness run --env-name ENV --report-dir DIR` first, or pass the directory it wrote"
    )
    if not directory.is_dir():
        why = "it does not exist" if not directory.exists() else "it is not a directory"
        raise _refuse(directory, why, run_first)
    if not path.is_file():
        why = f"it holds no {path.name} (the run did not finish, or this is not a report dir)"
        raise _refuse(directory, why, run_first)
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _refuse(directory, f"its {path.name} cannot be read ({exc})",
                      "rerun the matrix there to rewrite it") from None
    if isinstance(data, dict) and "environments" in data:
        raise _refuse(directory, f"its {path.name} is itself a merged report",
                      "merge the per-environment report dirs it was made from")
    try:
        environment = data["environment"]
        name = environment["name"]
        if not isinstance(name, str) or not name:
            raise TypeError(f"environment.name is {name!r}, not a name")
        results = [CellResult.from_json(cell) for cell in data["cells"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise _refuse(directory, f"its {path.name} is not a report of `python -m harness run` ({what})",
                      "rerun the matrix there to rewrite it") from None
    for result in results:  # a cell the run skipped before judging carries no environment name
        result.environment = result.environment or name
    return EnvironmentReport(name=name, directory=directory, environment=dict(environment), results=results)


def _record_stem(report: EnvironmentReport, cell_id: str) -> Path:
    return ReportDir(report.record_dir(cell_id)).record(cell_id)


def _has_record(report: EnvironmentReport, cell_id: str) -> bool:
    stem = _record_stem(report, cell_id)
    return all(stem.with_name(stem.name + suffix).is_file() for suffix in RECORD_SUFFIXES)


def cross_checks(inputs: Sequence[EnvironmentReport]) -> list[CrossCheck]:
    """Every non-DeepSpeed cell that ran (not skipped) in two or more inputs, with both records on
    disk: each later input's record against the first one's (equal to the first means equal to
    each other). Cells in the order they first appear."""
    from harness.judge.cell_verdict import cross_environment
    from harness.record.record_format import Record

    # Keyed by torch release too: bit for bit holds between environments of one torch (another
    # torch may change any kernel's last bits; the version sweep's record changes show by how much).
    holders: dict[tuple[str, str], list[EnvironmentReport]] = {}
    for report in inputs:
        for result in report.results:
            if result.cell.is_deepspeed or Status(result.status) is Status.SKIPPED:
                continue
            if _has_record(report, result.id):
                holders.setdefault((result.id, str(report.environment.get("torch", ""))), []).append(report)
    checks: list[CrossCheck] = []
    for (cell_id, _), reports in holders.items():
        baseline, *others = reports
        for other in others:
            try:
                record = Record.load(_record_stem(other, cell_id))
            except Exception as exc:  # RecordError: cut short or edited; the comparison cannot hold
                note = f"the record of {other.record_dir(cell_id)} cannot be read ({exc})"
                checks.append(CrossCheck(cell_id, baseline.name, other.name, False, note, "record", math.nan))
                continue
            comparison, note = cross_environment(record, _record_stem(baseline, cell_id))
            checks.append(
                CrossCheck(
                    cell_id,
                    baseline.name,
                    other.name,
                    comparison.ok,
                    note,
                    comparison.first_divergence,
                    float(comparison.max_abs_diff),
                )
            )
    return checks


def _check_inputs(directories: Sequence[Path], inputs: Sequence[EnvironmentReport], out_dir: Path) -> None:
    seen: dict[str, Path] = {}
    for report in inputs:
        if report.name in seen:
            raise UsageError(
                explain(
                    f"report dirs {str(seen[report.name])!r} and {str(report.directory)!r}",
                    f"both hold environment {report.name!r} ({ReportDir.REPORT_JSON}'s environment.name), "
                    "and the "
                    "merged grid has one row per environment and task",
                    "one report dir per environment, e.g. reports/nodeepspeed reports/deepspeed, or every "
                    "shard of one (runs with --shard K/N)",
                    "pass each environment's report dir once (a run names its environment with --env-name)",
                )
            )
        seen[report.name] = report.directory
    out = Path(out_dir).resolve()
    for directory in directories:
        if Path(directory).resolve() == out:
            raise UsageError(
                explain(
                    f"--out {str(out_dir)!r}",
                    "it is one of the report dirs being merged; the merged report would overwrite it",
                    "a directory of its own, e.g. reports/merged",
                    "pass another --out",
                )
            )


def merge_reports(directories: Sequence[Path], out_dir: Path) -> MergedReport:
    """Read, check, compare; nothing is written (see `merge_report_dirs`)."""
    if not directories:
        raise UsageError(explain("report merge", "no report dir given", _VALID_DIR,
                                 "name at least one, e.g. reports/nodeepspeed reports/deepspeed"))
    from harness.shard.combine import join_shards
    from harness.versions.table import behaviour_columns, version_row

    # The shards of one environment become that environment (refused when overlapping, missing
    # a shard, or of another commit, matrix, goldens or selection): harness.shard.combine.
    inputs = join_shards([read_report_dir(Path(d)) for d in directories])
    _check_inputs(directories, inputs, out_dir)
    rows = [version_row(r.name, r.directory, r.environment, r.results) for r in inputs]
    return MergedReport(inputs=inputs, cross=cross_checks(inputs),
                        versions=[r for r in rows if r is not None],
                        behaviours=behaviour_columns({r.name: r.directory for r in inputs}))


def merge_report_dirs(directories: Sequence[Path], out_dir: Path) -> MergedReport:
    """Merge the report dirs into `out_dir` (report.json, junit.xml, report.md, report.html)."""
    merged = merge_reports(directories, out_dir)
    write_merged_reports(merged, Path(out_dir))
    return merged
