"""`python -m harness golden [--check | --update | --show TASK] [--task T] [--precision P]
[--matrix FILE]`.

The goldens are those of the matrix in use: `golden/` beside `--matrix FILE` (the repository's
`matrix/golden/` by default), for the tasks that matrix names (`--task` narrows it). A changed or
missing golden is reported with the exact command that rewrites that golden alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import EXIT_FAILED, GoldenError, explain
from harness.plan.cell import PRECISIONS
from harness.plan.matrix import Matrix, load_matrix

if TYPE_CHECKING:  # the CLI loads torch only for the command that needs it
    from harness.golden.golden_check import GoldenCheck

EXIT_OK = 0


def add_arguments(golden: argparse.ArgumentParser) -> None:
    mode = golden.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="regenerate and compare (the default)")
    mode.add_argument("--update", action="store_true", help="rewrite the goldens that changed or are new")
    mode.add_argument("--show", metavar="TASK", help="print a golden's numbers (with --precision: that one)")
    golden.add_argument("--task", action="append", default=None, help="only this task (repeatable)")
    golden.add_argument("--precision", action="append", default=None, choices=PRECISIONS)
    golden.add_argument("--matrix", type=Path, default=None,
                        help="matrix file; its goldens are in golden/ beside it (default matrix/matrix.toml)")


def matrix_tasks(matrix: Matrix) -> list[str]:
    """The tasks of the matrix that own a golden (a canary borrows its base task's)."""
    from harness.golden.golden_store import owns_golden
    from harness.tasks import get_task

    names = dict.fromkeys(cell.task for cell in matrix.all_cells())
    return [name for name in names if owns_golden(get_task(name))]


def cmd_golden(args: argparse.Namespace) -> int:
    matrix = load_matrix(args.matrix)  # imports a user's tasks, says where the goldens are
    if args.show:
        return _show(matrix, args.show, args.precision)
    from harness.golden import golden_store as golden

    known = matrix_tasks(matrix)
    tasks = args.task if args.task is not None else known
    for name in tasks:
        if name not in known:
            raise GoldenError(explain(f"--task {name!r}", f"it is not a task of {matrix.path} that owns a "
                                      "golden", known, "name one of these, or add the task to that matrix"))
    if args.update:
        checks = golden.update_goldens(tasks=tasks, precisions=args.precision, matrix_path=matrix.path)
    else:
        checks = golden.check_goldens(tasks=tasks, precisions=args.precision, matrix_path=matrix.path)
    for check in checks:
        print(check.summary())
        for line in check.differences:
            print(f"    {line}")
    refused = [check for check in checks if check.refused]
    if args.update:
        rewritten = sum(check.rewritten for check in checks)
        where = matrix.golden_dir or golden.GOLDEN_DIR
        print(f"{rewritten} golden(s) rewritten in {where}, {len(checks) - rewritten} kept" if rewritten
              else "goldens unchanged")
        return _refused(refused) if refused else EXIT_OK
    if refused:
        return _refused(refused)
    failed = [check for check in checks if not check.passed]
    if failed:
        print(f"{len(failed)} of {len(checks)} golden(s) changed or missing. Fix: find out why they "
              "moved; if the change is intended, rewrite exactly those and review the diff:")
        for check in failed:
            task, _, precision = check.label.rpartition("-")
            print(f"    {golden.update_command(task, precision, matrix.path)}")
        return EXIT_FAILED
    print(f"{len(checks)} golden(s) reproduce (bit-identical or within the regeneration tolerance)")
    return EXIT_OK


def _refused(refused: list[GoldenCheck]) -> int:
    """A half-precision golden the guard refused is an error whatever else happened: its message
    (printed above) says why and what to change; regenerating it would change nothing."""
    print(f"{len(refused)} half-precision golden(s) refused: bit-identical to the fp32 golden "
          f"({', '.join(check.label for check in refused)}); see the Fix: above")
    return EXIT_FAILED


def _show(matrix: Matrix, task: str, precisions: list[str] | None) -> int:
    from harness.golden.golden_show import show_golden
    from harness.golden.golden_store import golden_stem_to_read, load_golden

    known = matrix_tasks(matrix)
    if task not in known:
        raise GoldenError(explain(f"--show {task!r}", f"it is not a task of {matrix.path} that owns a golden",
                                  known, "name one of these"))
    for i, precision in enumerate(precisions or PRECISIONS):
        record = load_golden(task, precision, matrix_path=matrix.path)
        if i:
            print()
        for line in show_golden(record, golden_stem_to_read(task, precision, matrix.golden_dir)):
            print(line)
    return EXIT_OK
