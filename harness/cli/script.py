"""`python -m harness script [-k EXPR] [-m MARKEXPR] [--matrix FILE] [--implementation NAME]
[--reference SHAPE] [--report-dir DIR] [--timeout S] [--name NAME] train.py [script args...]`.

`--implementation accelerate`: the script is written against Hugging Face Accelerate and runs
through `accelerate launch` (cell ids end in -accelerate); default: core (accelerate_core).

Harness options come before the script; everything after the script's path is the script's own.
In the script's arguments `{processes}`, `{N/processes}` (N divided by the cell's world size, for
a per-process batch size), `{cell_dir}` and `{cell_id}` are filled in per cell.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.errors import UsageError, explain
from harness.layout.report_dir import ReportDir
from harness.plan.availability import probe_host
from harness.plan.matrix import load_matrix
from harness.plan.selection import select
from harness.script.cells import DEFAULT_REFERENCE, script_cells, script_name
from harness.script.script_run import ScriptRun, run_script


def add_arguments(script: argparse.ArgumentParser) -> None:
    script.add_argument("-k", dest="keyword", metavar="EXPR",
                        help="pytest -k grammar over the script's cell ids")
    script.add_argument("-m", dest="markexpr", metavar="MARKEXPR", help="pytest marker expression")
    script.add_argument("--matrix", type=Path, default=None,
                        help="whose backends and tolerance table (default matrix/matrix.toml)")
    script.add_argument("--implementation", action="append", metavar="NAME",
                        help="what the script is written against: core (accelerate_core, the default) or "
                        "accelerate (Hugging Face Accelerate, run through `accelerate launch`; ids end in "
                        "-accelerate); repeatable, 'all' for every one of the matrix's implementation axis")
    script.add_argument("--reference", default=DEFAULT_REFERENCE, metavar="SHAPE",
                        help="the cell the others are compared with: {device}{n}-{strategy} at each cell's "
                        "precision (default cpu1-single), or a full one such as cpu1-single-fp32")
    script.add_argument("--report-dir", type=Path, default=None,
                        help="default: a new reports/scripts/<time>-<name>/")
    script.add_argument("--overwrite", action="store_true", help="let --report-dir replace an earlier report")
    script.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                        help="per cell (a whole run)")
    script.add_argument("--name", default=None,
                        help="the task part of the cell ids (default: the script's stem)")
    script.add_argument("script", type=Path, metavar="train.py", help="your training script")
    script.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")


def cmd_script(args: argparse.Namespace) -> int:
    from harness.cli.run import check_writable, refuse_to_replace
    from harness.plan.selection import of_implementations
    from harness.report import environment_info, print_summary, write_reports

    if not args.script.is_file():
        raise UsageError(explain(f"script {str(args.script)!r}", "no such file", "a path to a Python file",
                                 "check the path (relative to the current directory)"))
    name = script_name(args.script, args.name)
    matrix = load_matrix(args.matrix)
    chosen = of_implementations(matrix.cells, matrix.axis("implementation"), args.implementation)
    wanted = {cell.implementation for cell in chosen}
    cells = select(script_cells(matrix, name, wanted), args.keyword, args.markexpr)
    if not cells:
        raise UsageError(explain(
            f"selection -k {args.keyword!r} -m {args.markexpr!r}", "it matches no backend of the matrix",
            ", ".join(c.id for c in script_cells(matrix, name, wanted)[:6]) + ", ...", "loosen -k / -m"))
    report_dir = args.report_dir or Path("reports") / "scripts" / f"{time.strftime('%Y%m%d-%H%M%S')}-{name}"
    refuse_to_replace(report_dir, args.overwrite)
    check_writable(report_dir)
    run = ScriptRun(script=args.script.resolve(), arguments=list(args.script_args), matrix=matrix,
                    reference=args.reference, report_dir=report_dir, timeout_s=args.timeout,
                    host=probe_host())
    for cell in cells:  # a bad placeholder or reference is bad input: said before the first launch
        from harness.script.cells import arguments_for, reference_of

        reference_of(cell, args.reference)
        arguments_for(run.arguments, cell, ReportDir(report_dir).cell_dir(cell.id))

    def progress(result: object) -> None:
        from harness.judge.outcome import CellResult

        assert isinstance(result, CellResult)
        print(f"{result.id:<36} {result.status.value:<8} {result.duration_s:6.1f} s  {result.reason}",
              flush=True)

    results = run_script(run, cells, progress)
    environment = environment_info("script")
    environment.script = {"path": str(args.script), "arguments": list(args.script_args),
                          "reference": args.reference}
    write_reports(results, environment, report_dir)
    print_summary(results)
    print(f"report: {ReportDir(report_dir).report_html}")
    return 1 if any(r.status.is_unexpected_failure for r in results) else 0
