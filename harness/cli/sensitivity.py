"""`python -m harness sensitivity`: the harness's own detection rate over the bug catalog
(harness.sensitivity, docs/sensitivity.md). Exit 0 only when every entry tried was caught; a miss
or a catalog error (a patch that no longer applies) exits 1. With --kill-matrix, each entry runs on
every cell it touches and the answer is "caught in N of M"; exit 1 when an entry is caught in no
cell or is a catalog error (each miss is printed with its closest comparison)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from harness.errors import EXIT_FAILED, EXIT_USAGE

EXIT_OK = 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--fast", action="store_true",
                       help="only the fast subset: four evidence catches, about a minute")
    which.add_argument("--only", action="append", metavar="NAME", help="only this entry (repeatable)")
    parser.add_argument("--list", action="store_true", help="print the catalog and exit")
    parser.add_argument("--timeout", type=float, default=180.0, metavar="SECONDS", help="per cell")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the results here")
    parser.add_argument("--keep-reports", type=Path, default=None, metavar="DIR",
                        help="keep each entry's run report under DIR/<name>/")
    parser.add_argument("--exact", action="store_true",
                        help="judge the control and every trial with the exact tier too (`run "
                             "--exact`): a cell of the tier catches a bug that leaves it not "
                             "bit-identical to its reference")
    parser.add_argument("--kill-matrix", action="store_true",
                        help="run each entry on every CPU cell it touches (its `affects`) and report "
                             "caught in N of M cells")


def cmd_sensitivity(args: argparse.Namespace) -> int:
    from harness.sensitivity.catalog import CATALOG, FAST, by_name
    from harness.sensitivity.trial import control_run, try_bug

    if args.list:
        for bug in CATALOG:
            print(f"{bug.name:<36} {bug.area:<18} -k {bug.select:<30} {bug.imitates}")
        print(f"{len(CATALOG)} entries")
        return EXIT_OK
    try:
        bugs = by_name(FAST) if args.fast else by_name(args.only) if args.only else list(CATALOG)
    except KeyError as exc:
        print(f"error: {exc.args[0]}")
        return EXIT_USAGE
    start = time.monotonic()
    control = control_run(bugs, timeout_s=args.timeout, keep=args.keep_reports, affected=args.kill_matrix,
                          exact=args.exact)
    print(control.line(), flush=True)
    if args.kill_matrix:
        return _kill_matrix(bugs, control, args, start)
    trials = []
    for index, bug in enumerate(bugs, 1):
        trial = try_bug(bug, timeout_s=args.timeout, control=control, keep=args.keep_reports,
                        exact=args.exact)
        trials.append(trial)
        print(f"[{index}/{len(bugs)}] {trial.verdict.upper():<13} {bug.name} ({trial.seconds:.0f} s, "
              f"-k {bug.select}): {trial.detail}", flush=True)
    wall = time.monotonic() - start
    caught = [t for t in trials if t.verdict == "caught"]
    missed = [t for t in trials if t.verdict == "missed"]
    errors = [t for t in trials if t.verdict == "catalog_error"]
    print()
    print(f"catalog: {len(bugs)} bug(s){' (fast subset)' if args.fast else ''}; caught {len(caught)} "
          f"({len(caught) / max(len(bugs), 1):.0%}); missed {len(missed)}; catalog errors {len(errors)}; "
          f"wall time {wall:.0f} s")
    for trial in missed:
        print(f"  MISSED {trial.bug.name} (imitates: {trial.bug.imitates}); closest: {trial.detail}")
    for trial in errors:
        print(f"  CATALOG ERROR {trial.detail}")
    if args.json is not None:
        summary = {"size": len(bugs), "caught": len(caught), "wall_s": round(wall, 1),
                   "control": control.statuses, "trials": [t.to_json() for t in trials]}
        args.json.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return EXIT_OK if len(caught) == len(bugs) else EXIT_FAILED


def _kill_matrix(bugs: list[Any], control: Any, args: argparse.Namespace, start: float) -> int:
    from harness.sensitivity.kill import kill_row, summary_lines

    rows = []
    for index, bug in enumerate(bugs, 1):
        row = kill_row(bug, timeout_s=args.timeout, control=control, keep=args.keep_reports, exact=args.exact)
        rows.append(row)
        print(f"[{index}/{len(bugs)}] {row.line()} ({row.seconds:.0f} s)", flush=True)
    print()
    for line in summary_lines(rows)[len(rows):]:
        print(line)
    print(f"wall time {time.monotonic() - start:.0f} s")
    if args.json is not None:
        summary = {"kill_matrix": [row.to_json() for row in rows], "control": control.statuses,
                   "wall_s": round(time.monotonic() - start, 1)}
        args.json.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return EXIT_OK if all(row.caught and not row.error for row in rows) else EXIT_FAILED
