"""`python -m harness versions probe --report-dir DIR` and `python -m harness versions table DIR...`.

probe: in this environment, write DIR/version_status.json (is the installed torch / DeepSpeed one
the core supports; if not, the exact reason) and DIR/behaviours.json (each DeepSpeed behaviour
the core reconciles, reproduced with DeepSpeed alone: present / fixed, and whether the core's
patch for it is on). Exit 1 when a patch's gate disagrees with the reproduction (on where the
behaviour is fixed, off where it is present); 0 otherwise, supported or not: the files say.

table: the version table and the behaviour x version table of the sweep's report dirs (markdown),
then, for report dirs of Hugging Face Accelerate's cells, its behaviours x its releases
(harness.versions.implementation_table).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import EXIT_FAILED


def add_arguments(versions: argparse.ArgumentParser) -> None:
    sub = versions.add_subparsers(dest="versions_command", required=True, metavar="{probe,table}")
    probe = sub.add_parser("probe", help="this environment's support status and DeepSpeed behaviours")
    probe.add_argument("--report-dir", type=Path, required=True, metavar="DIR")
    probe.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS", help="of the probe launch")
    table = sub.add_parser("table", help="the sweep's tables from the version environments' report dirs")
    table.add_argument("dirs", nargs="+", type=Path, metavar="DIR")
    table.add_argument("--matrix", type=Path, default=None, metavar="FILE",
                       help="the matrix.toml whose [[expected]] entries name the rows "
                       "(default: the repository's)")


def _probe(args: argparse.Namespace) -> int:
    from harness.versions.behaviours import write_behaviours
    from harness.versions.probe import run_probe
    from harness.versions.status import environment_status, write_status

    args.report_dir.mkdir(parents=True, exist_ok=True)
    status = environment_status()
    write_status(args.report_dir, status)
    print(f"torch {status['torch']}, deepspeed {status['deepspeed'] or '(absent)'}: "
          + ("supported by the core" if status["supported"] else f"NOT supported: {status['reason']}"))
    if status["stage"] in ("install", "import", "op build"):
        write_behaviours(args.report_dir, {"torch": status["torch"], "deepspeed": status["deepspeed"]}, [],
                         error=status["reason"])
        return 0
    results, error = run_probe(args.timeout)
    write_behaviours(args.report_dir, {"torch": status["torch"], "deepspeed": status["deepspeed"]}, results,
                     error)
    if error:
        print(f"probe: {error}")
    for result in results:
        gate = "" if result.gate_on is None else f"  (core patch {'on' if result.gate_on else 'off'})"
        print(f"  {result.behaviour:<28} {result.verdict:<8}{gate}  {result.evidence}")
    wrong = [r for r in results if r.gate_agrees is False]
    for result in wrong:
        print(f"GATE DISAGREES: {result.behaviour}: patch {'on' if result.gate_on else 'off'} where the "
              f"reproduction says {result.verdict}")
    return EXIT_FAILED if wrong else 0


def _table(args: argparse.Namespace) -> int:
    from harness.report.merge_reports import read_report_dir
    from harness.versions.table import behaviour_columns, behaviours_markdown, version_row, versions_markdown

    reports = [read_report_dir(d) for d in args.dirs]
    rows = [row for r in reports if (row := version_row(r.name, r.directory, r.environment, r.results))]
    print("\n".join(versions_markdown(rows)))
    print()
    print("\n".join(behaviours_markdown(behaviour_columns({r.name: r.directory for r in reports}))))
    _print_implementation_table(reports, args.matrix)
    return 0


def _print_implementation_table(reports: list, matrix_file: Path | None) -> None:
    """Accelerate's behaviours x its releases, read from the environments of that implementation."""
    from harness.plan.matrix import load_matrix
    from harness.versions.implementation_table import implementation_markdown

    lines = implementation_markdown(reports, load_matrix(matrix_file).expected)
    if lines:
        print()
        print("\n".join(lines))


def cmd_versions(args: argparse.Namespace) -> int:
    return _probe(args) if args.versions_command == "probe" else _table(args)
