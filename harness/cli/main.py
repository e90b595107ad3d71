"""`python -m harness list|run|golden|ci|report merge|init|script|versions|sensitivity|calibrate`.

Exit codes: 0 nothing failed unexpectedly; 1 a cell failed (failed, xpassed, error, timeout,
crashed), goldens/workflows differ, or merged environments' records differ; 2 bad input (the
message says what, why, valid, fix);
130/143 interrupted by SIGINT/SIGTERM (the partial report is written first).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.errors import EXIT_FAILED, EXIT_USAGE, HarnessError
from harness.layout.report_dir import ReportDir

EXIT_OK = 0


def _selection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="pytest -k grammar over cell ids")
    parser.add_argument("-m", dest="markexpr", metavar="MARKEXPR", help="pytest marker expression")
    parser.add_argument("--matrix", type=Path, default=None, help="matrix file (default matrix/matrix.toml)")
    parser.add_argument("--implementation", action="append", metavar="NAME",
                        help="the implementation whose cells to select (repeatable; 'all' for every one of "
                        "the matrix's implementation axis; default: core, this project's own)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(
            f"--timeout {text!r}: it is not a positive number of seconds. Valid: e.g. 30 or 120.5. "
            "Fix: give the seconds one cell may take"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    from harness.cli import shard as shard_cli

    lister = sub.add_parser("list", help="list the selected cells and whether each runs here")
    _selection_args(lister)
    shard_cli.add_arguments(lister)
    run = sub.add_parser("run", help="run the selected cells and write a report")
    _selection_args(run)
    shard_cli.add_arguments(run)
    run.add_argument("--report-dir", type=Path, default=None,
                     help="default: a new reports/runs/<time>-<env-name>/ (reports/latest points at it)")
    run.add_argument("--overwrite", action="store_true",
                     help="let --report-dir replace the report of an earlier run there")
    run.add_argument("--isolate", action="store_true", help="one launch per cell")
    run.add_argument("--timeout", type=_seconds, default=120.0, metavar="SECONDS", help="per cell")
    again = run.add_mutually_exclusive_group()
    again.add_argument("--resume", type=Path, metavar="DIR", help="run only cells missing or failed in DIR")
    again.add_argument("--last-failed", action="store_true",
                       help="--resume the --report-dir, or the latest run (reports/latest)")
    run.add_argument("--env-name", default=None, help="environment of matrix.toml (default: detected)")
    run.add_argument(
        "--compare-records",
        type=Path,
        metavar="DIR",
        help="another environment's report dir: non-DeepSpeed records must be identical (same torch); "
        "every cell's numbers are classed bit-identical / within tolerance / diverged against it",
    )
    run.add_argument("--no-emulation", action="store_true", help="skip fp16 DeepSpeed CPU cells")
    run.add_argument("--allow-empty", action="store_true",
                     help="exit 0 even when every selected cell was skipped (default: exit 5, with "
                     "the skip reasons: a run that judged nothing is not a pass)")
    run.add_argument("--exact", action="store_true",
                     help="also judge the exact tier: a passing CPU cell whose computation the "
                     "reduction-order reference follows fails unless its record is bit-identical "
                     "to it (docs/calibration.md, section 4)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    run.add_argument("--profile", action="store_true",
                     help="print where the run's time went: start-up, each cell phase, judging, "
                     f"confirmations (always in {ReportDir.REPORT_JSON}: environment.startup.profile)")
    from harness.cli import golden as golden_cli
    from harness.cli import init as init_cli
    from harness.cli import script as script_cli

    golden = sub.add_parser("golden", help="check (default), update or show the golden baselines")
    golden_cli.add_arguments(golden)
    init_cli.add_arguments(sub.add_parser(
        "init", help="write a starter matrix.toml and task package into DIR"))
    script_cli.add_arguments(sub.add_parser(
        "script", help="run your own training script on every selected backend and compare it with its "
        "reference cell"))
    ci = sub.add_parser("ci", help="write .github/workflows from matrix.toml")
    ci.add_argument("--check", action="store_true", help="exit 1 when committed files differ")
    ci.add_argument("--matrix", type=Path, default=None)
    from harness.cli.report_merge import add_arguments

    report = sub.add_parser("report", help="work on report dirs: `report merge DIR... --out DIR`")
    add_arguments(report)
    from harness.cli import versions as versions_cli

    versions_cli.add_arguments(sub.add_parser("versions", help="the version sweep: `versions probe|table`"))
    from harness.cli import sensitivity as sensitivity_cli

    sensitivity_cli.add_arguments(sub.add_parser(
        "sensitivity",
        help="the harness's detection rate: run the bug catalog against patched copies of the core"))
    from harness.cli import calibrate as calibrate_cli

    calibrate_cli.add_arguments(sub.add_parser(
        "calibrate",
        help="the benign noise behind each tolerance and the smallest gradient error each cell catches"))
    return parser


def cmd_list(args: argparse.Namespace) -> int:
    from harness.cli.run import selected_cells
    from harness.cli.shard import shard_line, take_shard
    from harness.plan.availability import check, probe_host

    matrix, cells = selected_cells(args)
    cells, shard = take_shard(args, matrix, cells)
    if shard is not None:
        print(shard_line(shard))
    host = probe_host()
    for cell in cells:
        verdict = check(cell, host)
        expected = matrix.expected_outcome(cell)
        state = (
            "runs" + (" (emulated)" if verdict.emulated else "")
            if verdict.runnable
            else "skip: " + verdict.reason
        )
        note = f"  [expected: {expected.status}: {expected.reason}]" if expected else ""
        print(f"{cell.id:<36} {','.join(cell.markers):<32} {state}{note}")
    print(f"{len(cells)} cell(s)")
    return EXIT_OK


def cmd_ci(args: argparse.Namespace) -> int:
    from harness.cli import ci

    if args.check:
        stale = ci.stale_workflows(matrix_path=args.matrix)
        for path in stale:
            print(f"{path}: differs from what `python -m harness ci` renders from matrix.toml")
        return EXIT_FAILED if stale else EXIT_OK
    for path in ci.write_workflows(matrix_path=args.matrix):
        print(f"wrote {path}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from accelerate_core.commands.pipes import quiet_when_the_reader_leaves
    from accelerate_core.errors import ConfigFileError, InvalidSettingError
    from harness.cli.calibrate import cmd_calibrate
    from harness.cli.golden import cmd_golden
    from harness.cli.init import cmd_init
    from harness.cli.report_merge import cmd_report
    from harness.cli.run import cmd_run
    from harness.cli.script import cmd_script
    from harness.cli.sensitivity import cmd_sensitivity
    from harness.cli.versions import cmd_versions

    commands = {"list": cmd_list, "run": cmd_run, "golden": cmd_golden, "ci": cmd_ci, "report": cmd_report,
                "init": cmd_init, "script": cmd_script,
                "versions": cmd_versions, "sensitivity": cmd_sensitivity, "calibrate": cmd_calibrate}
    try:
        return quiet_when_the_reader_leaves(lambda: commands[args.command](args))
    except HarnessError as exc:  # every message says what, why, what is valid, the fix
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (ConfigFileError, InvalidSettingError) as exc:  # the core's, for a file or value given here
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # outside a run's own handling (e.g. while loading inputs)
        print(f"interrupted ({exc or 'SIGINT'})", file=sys.stderr)
        return 143 if str(exc) == "SIGTERM" else 130


if __name__ == "__main__":
    sys.exit(main())
