"""`python -m harness report merge DIR... --out DIR`: one report of several environments.

The shards of one environment (`python -m harness run --shard K/N`, docs/shards.md) are joined
into that environment: every shard once, all of one commit, matrix, goldens and selection.

Exit codes: 0 no input cell failed unexpectedly and every cross-environment comparison is
bit-identical; 1 otherwise; 2 a DIR without a readable report.json, two unsharded DIRs of the same
environment, shards that overlap, miss a shard or ran something else, or an --out that is one of
the DIRs (the message says what, why, valid, fix).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import EXIT_FAILED
from harness.layout.report_dir import ReportDir

SHOWN_PROBLEMS = 10  # unexpected results printed; the report lists them all


def add_arguments(report: argparse.ArgumentParser) -> None:
    """`report merge` under the `report` command's parser."""
    sub = report.add_subparsers(dest="report_command", required=True, metavar="{merge}")
    merge = sub.add_parser(
        "merge",
        help="merge the report dirs of several environments (or of one environment's shards) into one report",
        description="Merge report dirs of `python -m harness run` (one per environment, or every shard "
        "of one) into one report.",
    )
    merge.add_argument("dirs", nargs="+", type=Path, metavar="DIR",
                       help=f"a report dir (holds {ReportDir.REPORT_JSON})")
    merge.add_argument("--out", type=Path, required=True, metavar="DIR", help="where the merged report goes")


def cmd_report(args: argparse.Namespace) -> int:
    from harness.report.merge_reports import merge_report_dirs
    from harness.report.summary import headline, unexpected

    merged = merge_report_dirs(args.dirs, args.out)
    for report in merged.inputs:
        print(f"{report.name:<16} {headline(report.results)}  ({report.where})")
    identical = sum(check.identical for check in merged.cross)
    print(f"cross-environment: {identical} bit-identical, {len(merged.differing)} differ")
    for check in merged.differing:
        print(f"  differs  {check.cell_id} ({check.baseline} vs {check.other}): {check.note}")
    problems = unexpected(merged.results)
    for result in problems[:SHOWN_PROBLEMS]:
        print(f"  {result.status.value:<8} {result.id} in {result.environment}: {result.reason}")
    if len(problems) > SHOWN_PROBLEMS:
        print(f"  ... and {len(problems) - SHOWN_PROBLEMS} more in the report")
    print(("ok: " if merged.ok else "FAILED: ") + merged.verdict)
    print(f"report: {ReportDir(Path(args.out)).report_html}")
    return 0 if merged.ok else EXIT_FAILED
