"""`python -m harness run`: select, check the inputs, run, report, decide the exit code.

Every input is checked before the first launch (environment name, report dir, resume dir,
comparison dir), so a typo costs a second, not a matrix run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from accelerate_core.imports import is_deepspeed_available
from harness.cli.empty_run import EXIT_NOTHING_RAN, nothing_ran, nothing_ran_message
from harness.errors import UsageError, explain
from harness.judge.outcome import CellResult, Status
from harness.layout.report_dir import ReportDir
from harness.plan.cell import Cell
from harness.plan.matrix import Matrix, load_matrix
from harness.plan.selection import of_implementations, opt_in_requested, resume_requested, select

KEEP_ON_RESUME = (Status.PASSED, Status.SKIPPED, Status.XFAILED)




def selected_cells(args: argparse.Namespace) -> tuple[Matrix, list[Cell]]:
    matrix = load_matrix(args.matrix)
    implementations = matrix.axis("implementation"), getattr(args, "implementation", None)
    candidates = of_implementations(matrix.cells, *implementations)
    candidates += [cell for cell, word in matrix.opt_in_cells if opt_in_requested(args.keyword, word)]
    if resume_requested(args.keyword, args.markexpr):  # the core's own: a resume cell's implementation
        candidates += of_implementations(list(matrix.resume_cells), *implementations)
    cells = select(candidates, args.keyword, args.markexpr)
    if not cells:
        given = " ".join(
            f"{flag} {value!r}" for flag, value in (("-k", args.keyword), ("-m", args.markexpr)) if value
        )
        example = ", ".join(c.id for c in matrix.cells[:3]) or "(the matrix has no cells)"
        raise UsageError(
            explain(
                f"selection {given or '(none)'}",
                "it matches no cell of the matrix",
                f"substrings of cell ids such as {example}; markers deepspeed, ddp, gpu, multi_gpu, "
                "fp16, bf16, matrix; opt-in cells with -k canary",
                "run `python -m harness list` to see every cell id",
            )
        )
    return matrix, cells


def default_env_name() -> str:
    return "deepspeed" if is_deepspeed_available() else "nodeepspeed"


def check_env_name(matrix: Matrix, name: str) -> None:
    if not matrix.environments:
        return
    env = matrix.environments.get(name)
    if env is None:
        raise UsageError(
            explain(
                f"--env-name {name!r}",
                "no such environment in matrix.toml",
                sorted(matrix.environments),
                "use one of these names",
            )
        )
    if env.deepspeed != is_deepspeed_available():
        state = "installed" if is_deepspeed_available() else "not installed"
        raise UsageError(
            explain(
                f"--env-name {name!r}",
                f"that environment says deepspeed={env.deepspeed}, but deepspeed is {state} here",
                sorted(n for n, e in matrix.environments.items() if e.deepspeed == is_deepspeed_available()),
                "name the environment you are in (or omit --env-name to detect it)",
            )
        )


def check_env_pins(matrix: Matrix, name: str) -> None:
    """A version-sweep environment pins torch / deepspeed / accelerate: refuse to report under its name when
    the installed releases are others (its report would be read as that release's)."""
    from importlib import metadata

    env = matrix.environments.get(name)
    if env is None:
        return
    for package, pin in (("torch", env.torch_version), ("deepspeed", env.deepspeed_version),
                         ("accelerate", env.accelerate_version)):
        try:
            installed = metadata.version(package)
        except metadata.PackageNotFoundError:
            installed = "(not installed)"
        if pin and installed.split("+")[0] != pin:
            raise UsageError(explain(
                f"--env-name {name!r}", f"that environment pins {package}=={pin}, but {package} {installed} "
                "is installed here", f"the environment's own venv (pip install {package}=={pin})",
                "run it through `nox -s versions` (its venv has the pins), or name the environment "
                "you are in"))


def _print_record_changes(results: list[CellResult]) -> None:
    """--compare-records: how many cells' numbers moved against the other environment, and which."""
    from harness.judge.record_change_summary import record_changes_summary, summary_line

    summary = record_changes_summary(results)
    if summary is None:
        return
    print(summary_line(summary))
    for entry in summary["changed"]:
        if entry["change"] == "diverged":
            print(f"  diverged  {entry['id']}: first at {entry['first_difference']} "
                  f"(max abs diff {entry['max_abs_diff']:.3g})")


REPORTS = Path("reports")
LATEST = REPORTS / "latest"


def new_run_dir(env_name: str) -> Path:
    """A fresh folder per run without --report-dir: a run never replaces an earlier report."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = REPORTS / "runs" / f"{stamp}-{env_name}"
    suffix = 1
    while candidate.exists():  # two runs in the same second
        suffix += 1
        candidate = REPORTS / "runs" / f"{stamp}-{env_name}-{suffix}"
    return candidate


def point_latest_at(report_dir: Path) -> None:
    """reports/latest -> this run's folder (a relative link, replaced atomically)."""
    temporary = LATEST.with_name(f".latest-{os.getpid()}")
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(os.path.relpath(report_dir, LATEST.parent))
    os.replace(temporary, LATEST)


def latest_run() -> Path:
    if not LATEST.exists():
        raise UsageError(explain(
            "--last-failed without --report-dir", f"there is no {LATEST} (no run without --report-dir yet)",
            "a report dir of an earlier run", "pass --report-dir DIR (or --resume DIR) of the run to resume"))
    return LATEST.resolve()


def refuse_to_replace(report_dir: Path, overwrite: bool) -> None:
    """An earlier run's report is never replaced silently: only with --overwrite."""
    earlier = ReportDir(report_dir).report_json
    if overwrite or not earlier.exists():
        return
    try:
        summary = json.loads(earlier.read_text(encoding="utf-8")).get("summary", {})
        what = ", ".join(f"{count} {status}" for status, count in summary.items()) or "no cells"
    except (OSError, ValueError, AttributeError):
        what = "unreadable"
    raise UsageError(explain(
        f"--report-dir {str(report_dir)!r}", f"it holds the report of an earlier run ({what}), which this "
        "run would replace", "a new or empty folder; the same folder with --overwrite; or --resume it",
        f"pass another --report-dir, add --overwrite to replace it, or --resume {report_dir} to finish it"))


def check_writable(report_dir: Path) -> None:
    probe = ReportDir(report_dir).write_probe()
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise UsageError(
            explain(
                f"--report-dir {str(report_dir)!r}",
                f"it cannot be written ({exc.strerror or exc})",
                "a directory you can create and write",
                "pass another --report-dir or fix its permissions",
            )
        ) from None


def load_previous(resume_dir: Path, flag: str = "--resume") -> dict[str, CellResult]:
    path = ReportDir(resume_dir).report_json
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {c["id"]: CellResult.from_json(c) for c in data["cells"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            explain(
                f"{flag} {str(resume_dir)!r}",
                f"{path} is missing or unreadable ({exc})",
                f"a report dir of an earlier run (it holds {path.name})",
                "run without --resume, or point it at that run's --report-dir",
            )
        ) from None


def cmd_run(args: argparse.Namespace) -> int:
    from harness.cli.shard import check_resumed_shard, shard_line, take_shard
    from harness.report import Progress, environment_info, print_summary, write_reports
    from harness.run import signals
    from harness.run.runner import RunInterrupted, RunOptions, run_outcome

    signals.install()
    matrix, cells = selected_cells(args)
    cells, shard = take_shard(args, matrix, cells)
    env_name = args.env_name or default_env_name()
    check_env_name(matrix, env_name)
    check_env_pins(matrix, env_name)
    resume_dir = args.resume or (args.report_dir or latest_run() if args.last_failed else None)
    if resume_dir is not None:
        check_resumed_shard(resume_dir, shard)
    run_name = env_name if shard is None else f"{env_name}-shard{shard['index']}of{shard['count']}"
    report_dir = args.report_dir or resume_dir or new_run_dir(run_name)
    if resume_dir is None:
        refuse_to_replace(report_dir, args.overwrite)
    check_writable(report_dir)
    if args.compare_records is not None and not ReportDir(args.compare_records).records.is_dir():
        raise UsageError(
            explain(
                f"--compare-records {str(args.compare_records)!r}",
                "it holds no records/ folder",
                "the --report-dir of a finished run in another environment",
                "run the other environment first, then point here at its report dir",
            )
        )
    kept: dict[str, CellResult] = {}
    if resume_dir is not None:
        previous = load_previous(resume_dir, "--last-failed (report dir)" if args.last_failed else "--resume")
        kept = {
            c.id: previous[c.id]
            for c in cells
            if c.id in previous and previous[c.id].status in KEEP_ON_RESUME
        }
        print(f"resume: {len(kept)} cell(s) kept from {resume_dir}, {len(cells) - len(kept)} to run")
    to_run = [c for c in cells if c.id not in kept]
    if shard is not None:
        print(shard_line(shard))
    options = RunOptions(
        report_dir=report_dir,
        timeout_s=args.timeout,
        isolate=args.isolate,
        env_name=env_name,
        matrix_path=args.matrix,
        compare_records=args.compare_records,
        allow_cpu_fp16_emulation=not args.no_emulation,
        matrix=matrix,
        exact=args.exact,
    )
    environment = environment_info(env_name)
    if shard is not None:  # which part of the selection this report holds (harness.shard.identity)
        environment.shard = shard
    progress = Progress(len(to_run), enabled=not args.quiet)
    interrupted: str | None = None
    try:
        outcome = run_outcome(to_run, options, progress)
    except RunInterrupted as exc:
        signals.ignore_further()
        outcome, interrupted = exc.outcome, exc.signal_name
    finally:
        progress.close()
    by_id = {**kept, **{r.id: r for r in outcome.results}}
    results = [by_id[c.id] for c in cells if c.id in by_id]
    if interrupted:
        environment.interrupted = f"by {interrupted}: {len(results)} of {len(cells)} cells finished"
    environment.with_startup(outcome.startup)  # launches' start-up, outside cell clocks
    write_reports(results, environment, report_dir)
    if args.report_dir is None and resume_dir is None:
        point_latest_at(report_dir)
    print_summary(results)
    if outcome.startup is not None:
        print(outcome.startup.line())
    if args.profile:
        from harness.run.profile import profile_report

        print("\n".join(profile_report(outcome.startup.profile if outcome.startup else None,
                                        outcome.startup.per_launch if outcome.startup else [],
                                        os.cpu_count() or 1)))
    _print_record_changes(results)
    print(f"report: {ReportDir(report_dir).report_html}")
    if interrupted:
        print(
            f"interrupted by {interrupted}; partial report written; rerun with --resume {report_dir}",
            file=sys.stderr,
        )
        return signals.INTERRUPT_EXIT.get(interrupted, 130)
    if any(r.status.is_unexpected_failure for r in results):
        return 1
    if nothing_ran(results) and not args.allow_empty:
        print(nothing_ran_message(results, env_name), file=sys.stderr)
        return EXIT_NOTHING_RAN
    return 0

