"""`python -m harness calibrate`: the benign noise behind each tolerance and the smallest gradient
error each cell catches (harness.calibrate, docs/calibration.md). Exit 1 when a tolerance in force
is below the noise measured for it (its cells would fail on rounding alone), else 0."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import EXIT_FAILED, EXIT_USAGE
from harness.layout.report_dir import ReportDir

if TYPE_CHECKING:
    from harness.plan.matrix import Matrix

EXIT_OK = 0
WEIGHTS_DEFAULT = Path("(the matrix's weights_per_task)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", action="append", metavar="NAME",
                        help="calibrate this task only (repeatable; default: every built-in task with a "
                        "golden)")
    parser.add_argument("--precision", action="append", choices=["fp32", "fp16", "bf16"],
                        help="this precision only (repeatable; default: all three)")
    parser.add_argument("--safety-factor", type=float, default=None, metavar="X",
                        help="proposed atol = X times the worst benign need (default 2)")
    parser.add_argument("--no-thresholds", action="store_true", help="measure the noise only")
    parser.add_argument("--check-records", type=Path, default=None, metavar="REPORT_DIR",
                        help="judge the passing cells of a run (python -m harness run --report-dir DIR) "
                        "again with each task's calibrated tolerance: which cells the variants do not "
                        "explain")
    parser.add_argument("--exact-tier", type=Path, default=None, metavar="REPORT_DIR",
                        help="measure which fp32 cells of a run a reference following their reduction "
                        "order reproduces bit for bit (the noise and threshold study is skipped)")
    parser.add_argument("--write-weight-tolerances", nargs="?", type=Path, const=WEIGHTS_DEFAULT,
                        default=None, metavar="FILE", help="write each task's tolerance for the final "
                        "weights of its fp16/bf16 single/ddp/fsdp cells from the measured noise (default: "
                        "the file matrix.toml's [tolerances] weights_per_task names); needs every task and "
                        "precision")
    parser.add_argument("--write-semantics-tolerances", action="store_true",
                        help="measure the own-semantics check's tolerances for the matrix's half-precision "
                        "CPU cells, write them (to the file [tolerances] semantics_per_task names, else "
                        "semantics_tolerances.toml beside the matrix) and stop: what a matrix of your own "
                        "tasks needs for the check (--write-weight-tolerances writes it too)")
    parser.add_argument("--keep-wider", action="store_true",
                        help="with --write-weight-tolerances or --write-semantics-tolerances: keep, per "
                        "entry, the wider of this machine's "
                        "measurement and the one already in the file (entries that hold on every CPU "
                        "measured)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every figure here")
    parser.add_argument("--matrix", type=Path, default=None, help="matrix file (default matrix/matrix.toml)")


def cmd_calibrate(args: argparse.Namespace) -> int:
    from harness.calibrate.against_cells import check_cells
    from harness.calibrate.calibrated import SAFETY_FACTOR, task_tolerances
    from harness.calibrate.cell_thresholds import cpu_environment, row_json
    from harness.calibrate.exact_thresholds import exact_thresholds
    from harness.calibrate.judged_thresholds import judged_thresholds
    from harness.calibrate.report import check_lines, lines, semantics_lines
    from harness.calibrate.semantics_file import semantics_below_noise
    from harness.calibrate.semantics_noise import measure_semantics, semantics_scope
    from harness.calibrate.study import run_study
    from harness.calibrate.weights_file import below_noise
    from harness.golden.golden_store import owned_golden_pairs
    from harness.plan.cell import PRECISIONS
    from harness.plan.matrix import load_matrix

    safety = SAFETY_FACTOR if args.safety_factor is None else args.safety_factor
    for flag, folder in (("--check-records", args.check_records), ("--exact-tier", args.exact_tier)):
        if folder is not None and not ReportDir(folder).report_json.is_file():
            print(f"error: {flag} {folder}: no {ReportDir.REPORT_JSON} there. Valid: the --report-dir of a "
                  "`python -m harness run` (it keeps records/). Fix: run the matrix with --report-dir first")
            return EXIT_USAGE
    if args.exact_tier is not None:
        return _exact_tier(args.exact_tier, args.json)
    if not safety >= 1:
        print(f"error: --safety-factor {safety:g}: a margin below 1 puts the tolerance inside the measured "
              "noise. Valid: a number >= 1, e.g. 2. Fix: pass --safety-factor 2")
        return EXIT_USAGE
    asked = (("--write-weight-tolerances", args.write_weight_tolerances is not None),
             ("--write-semantics-tolerances", args.write_semantics_tolerances))
    writing = [flag for flag, given in asked if given]
    if writing and (args.task or args.precision):
        print(f"error: {' and '.join(writing)} with --task/--precision: the file holds every task's entries "
              "and would lose the others. Valid: every task and precision. Fix: drop --task and --precision")
        return EXIT_USAGE
    if args.write_semantics_tolerances and args.write_weight_tolerances is None:
        return _write_semantics(load_matrix(args.matrix, weights_per_task=False), safety, args.keep_wider)
    if args.write_weight_tolerances is not None:  # first, so that the study below judges with them
        _write_weights(args.write_weight_tolerances, load_matrix(args.matrix, weights_per_task=False), safety,
                       keep_wider=args.keep_wider)
    elif args.keep_wider:
        print("error: --keep-wider without --write-weight-tolerances or --write-semantics-tolerances: it "
              "says how to write the file. Valid: with either. Fix: add --write-weight-tolerances")
        return EXIT_USAGE
    matrix = load_matrix(args.matrix) if args.matrix else load_matrix()
    owned = sorted({task for task, _ in owned_golden_pairs()})
    unknown = sorted(set(args.task or ()) - set(owned))
    if unknown:
        print(f"error: --task {', '.join(unknown)}: no golden of its own to calibrate against. "
              f"Valid: {', '.join(owned)}. Fix: pick from these")
        return EXIT_USAGE
    tasks, precisions = args.task or owned, args.precision or list(PRECISIONS)
    study = run_study(tasks, precisions, matrix.tolerances, safety, thresholds=not args.no_thresholds)
    judged = judged_thresholds(study.in_force, matrix, cpu_environment(matrix))
    exact = exact_thresholds(study.in_force, matrix, cpu_environment(matrix))
    semantics = measure_semantics(scope for scope in semantics_scope(matrix)
                                  if scope.key[1] in tasks and scope.key[0] in precisions)
    print("\n".join(lines(study, exact, judged) + semantics_lines(semantics, matrix.tolerances)))
    figures = {**study.to_json(), "thresholds_judged": [row_json(t) for t in judged],
               "thresholds_exact": [row_json(t) for t in exact],
               "semantics_needs": [asdict(n) for n in semantics]}

    if args.check_records is not None:
        checks = check_cells(args.check_records, task_tolerances(study.needs, matrix.tolerances, safety))
        print("\n".join(check_lines(checks, args.check_records)))
        figures["cell_checks"] = [asdict(c) for c in checks]
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        print(f"figures: {args.json}")
    below = [p for p in study.proposals if p.in_force < p.need.atol]
    weights_below = [*below_noise(study.needs, matrix.tolerances),
                     *semantics_below_noise(semantics, matrix.tolerances)]
    for line in weights_below:
        print(f"below the noise: {line}")
    return EXIT_FAILED if below or weights_below else EXIT_OK


def _exact_tier(report_dir: Path, json_path: Path | None) -> int:
    """Measured, never judged here: exit 0 whatever the share of exact cells (`run --exact` judges)."""
    from harness.calibrate.exact_judge import tier_lines
    from harness.calibrate.exact_tier import check_exact, exact_json, exact_lines

    checks = check_exact(report_dir)
    print("\n".join(exact_lines(checks, report_dir) + tier_lines(checks)))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        figures = {"exact_tier": exact_json(checks)}
        json_path.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        print(f"figures: {json_path}")
    return EXIT_OK


def _write_weights(target: Path, matrix: Matrix, safety: float, keep_wider: bool = False) -> None:
    from harness.calibrate.noise import measure
    from harness.calibrate.weights_file import keep_wider_entries, weight_tolerances, write_weight_tolerances
    from harness.golden.golden_store import owned_golden_pairs
    from harness.plan.tolerances import WEIGHTS_PER_TASK
    from harness.plan.weight_tolerances import HALF_PRECISIONS

    tasks = sorted({task for task, _ in owned_golden_pairs()})
    needs = measure(tasks, HALF_PRECISIONS, matrix.tolerances)

    if target == WEIGHTS_DEFAULT:
        named = matrix.raw.get("tolerances", {}).get(WEIGHTS_PER_TASK, "weight_tolerances.toml")
        target = matrix.path.parent / str(named)
    written = weight_tolerances(needs, matrix.tolerances, safety)
    if keep_wider and target.is_file():
        floors = {family: entry.atol for (precision, family), entry in matrix.tolerances.entries.items()
                  if precision == "fp32"}
        written = keep_wider_entries(written, target, safety, floors)
    write_weight_tolerances(target, written, safety)
    _write_semantics(matrix, safety, keep_wider)
    weights = sum(e.kind == "state_dict" for e in written.entries)
    print(f"per-task tolerances: {weights} weight and {len(written.entries) - weights} eval-output entries "
          f"written to {target}")
    for line in written.skipped:
        print(f"  no entry: {line}")
    for line in written.wider:
        print(f"  wider than its family: {line}")


def _write_semantics(matrix: Matrix, safety: float, keep_wider: bool) -> int:
    """The own-semantics check's tolerances, into the file [tolerances] semantics_per_task names
    (semantics_tolerances.toml beside the matrix when it names none, and then how to name it)."""
    from harness.calibrate.semantics_file import keep_wider as merge_wider
    from harness.calibrate.semantics_file import semantics_tolerances, write_semantics_tolerances
    from harness.calibrate.semantics_noise import measure_semantics, semantics_scope
    from harness.plan.semantics_tolerances import SEMANTICS_PER_TASK

    scopes = semantics_scope(matrix)
    if not scopes:
        print(f"error: {matrix.path}: no fp16/bf16 CPU cell the own-semantics check can judge (the check "
              "takes a core cell on the CPU whose computation a reference follows, docs/calibration.md "
              "section 6), so there is nothing to measure. Valid: a matrix with such cells. Fix: add fp16 or "
              "bf16 to its precision axis and a CPU shape")
        return EXIT_USAGE
    entries = semantics_tolerances(measure_semantics(scopes), scopes, safety)
    named = matrix.raw.get("tolerances", {}).get(SEMANTICS_PER_TASK)
    target = matrix.path.parent / str(named or "semantics_tolerances.toml")
    machines: tuple[str, ...] = ()
    if keep_wider and target.is_file():
        entries, machines = merge_wider(entries, target, scopes, safety)
    write_semantics_tolerances(target, entries, safety, machines)
    print(f"own-semantics check: {len(entries)} entries written to {target}")
    if not named:
        print(f"  the check uses them once {matrix.path.name} names the file: under [tolerances], add "
              f"{SEMANTICS_PER_TASK} = \"{target.name}\"")
    return EXIT_OK
