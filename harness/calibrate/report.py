"""The calibration as text: the noise table with the proposed tolerances beside those in force,
then the detection thresholds against their goals."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.calibrate.against_cells import CellCheck
from harness.calibrate.cell_thresholds import RowThreshold
from harness.calibrate.semantics_noise import SemanticsNeed
from harness.calibrate.study import Study
from harness.calibrate.thresholds import Threshold
from harness.calibrate.variants import VARIANTS
from harness.plan.tolerances import ToleranceTable


def lines(study: Study, exact: Sequence[RowThreshold] = (), judged: Sequence[RowThreshold] = ()) -> list[str]:
    """`judged` and `exact`: the rows of study.in_force again, as `run` (the own-semantics check
    included) and `run --exact` judge their cells (one per row, in the same order), or none: that
    column is left out."""
    out = ["benign noise: the plain reference under each variant, against the goldens",
           *(f"  {v.name:<24} {', '.join(v.families)}: {v.why}{_ran_with(study, v.name)}"
             for v in VARIANTS), "",
           f"{'entry':<24} {'worst need':>10}  {'in force':>8}  {'proposed':>8}  {'ratio':>6}  from",
           f"{'':<24} {'(atol)':>10}  {'':>8}  {f'({study.safety:g}x)':>8}"]
    for p in study.proposals:
        entry = f"{p.precision}.{p.family}.{p.kind}"
        ratio = "inf" if p.atol == 0 else f"{p.in_force_over_proposed:.1f}x"
        flag = "  BELOW THE NOISE" if p.in_force < p.need.atol else ""
        out.append(f"{entry:<24} {p.need.atol:>10.2e}  {p.in_force:>8.1e}  {p.atol:>8.1e}  {ratio:>6}  "
                   f"{p.need.task} {p.need.variant} {p.need.where}{flag}")
    if study.in_force:
        out += ["", "detection thresholds: the smallest e with every gradient x (1 + e) that fails the "
                "cell's comparison (goal: fp32 1e-4, fp16 1e-2, bf16 2e-2)",
                "as its weakest backend computes it (golden: the golden's loop, as single and DDP do; the "
                "others: the variants of that name)",
                "(golden: the golden comparison at the tolerances in force; run: as `python -m harness run` "
                "judges the row's passing cells, the own-semantics check included)",
                f"{'task':<12} {'precision':<9} {'family':<6} {'golden':>10}  {'run' if judged else '':>10}  "
                f"{'weakest':<21} {'calibrated':>10}  {'--exact' if exact else '':>10}  "
                "caught by (calibrated)"]
        exact_column: Sequence[RowThreshold | None] = exact or [None] * len(study.in_force)
        run_column: Sequence[RowThreshold | None] = judged or [None] * len(study.in_force)
        for now, tight, by_run, by_exact in zip(study.in_force, study.calibrated, run_column, exact_column,
                                                strict=True):
            out.append(f"{now.task:<12} {now.precision:<9} {now.family:<6} {_error(now):>10}  "
                       f"{_row_error(by_run):>10}  {now.semantics:<21} {_error(tight):>10}  "
                       f"{_row_error(by_exact):>10}  {_caught(tight)}")
        out += ["", summary(study)]
        if judged:
            out += row_details(judged, "run", "as `python -m harness run` judges their passing CPU cells "
                               "(the golden comparison, and the own-semantics check where it judges a "
                               "cell: the smaller of the two)",
                               "checked against their own-semantics reference")
        if exact:
            out += row_details(exact, "--exact", "as `python -m harness run --exact` judges their passing "
                               "CPU cells (a member of the exact tier fails once any bit moves; a cell "
                               "outside it keeps its tolerance, the row's in force; <=1e-7: caught at the "
                               "smallest e tried)", "judged exactly")
    return out


def semantics_lines(needs: Sequence[SemanticsNeed], table: ToleranceTable) -> list[str]:
    """The own-semantics check's noise: each reference's largest move under the variations, against
    the atol in force (harness.plan.semantics_tolerances)."""
    if not needs:
        return []
    moved = [n for n in needs if n.need > 0]
    out = ["", "own-semantics check: the reference computed as each backend computes, under twice the "
           "threads, exact accumulation of every half GEMM and kernels capped at AVX2: "
           f"{len(needs) - len(moved)} of {len(needs)} references kept every bit of their final weights; the "
           "others moved",
           f"  {'precision':<9} {'task':<12} {'semantics':<16} {'moved':>9}  {'atol in force':>13}  by"]
    for need in moved:
        entry = table.semantics.get(need.key)
        in_force = f"{entry.atol:.2g}" if entry is not None else "none"
        flag = "  BELOW THE NOISE" if entry is not None and need.need > entry.atol else ""
        ran = f" (its torch ran {need.ran_with})" if need.ran_with else ""
        precision, task, semantics = need.key
        out.append(f"  {precision:<9} {task:<12} {semantics:<16} {need.need:>9.2e}  {in_force:>13}  "
                   f"{need.variant}{ran}, state_dict/{need.where}{flag}")
    return out


def _ran_with(study: Study, variant: str) -> str:
    """For a variant run in a child process: what its torch reported, against this process's."""
    seen = sorted({n.ran_with for n in study.needs if n.variant == variant and n.ran_with})
    if not seen:
        return ""
    import torch

    return f" (here: its torch ran {', '.join(seen)}; this process {torch.backends.cpu.get_cpu_capability()})"


def summary(study: Study) -> str:
    def met(thresholds: list[Threshold]) -> str:
        unseen = sum(t.error is None for t in thresholds)
        return (f"{sum(t.meets_goal for t in thresholds)} of {len(thresholds)} meet the goal "
                f"({unseen} cannot see a uniform gradient error at all)")

    return f"in force: {met(study.in_force)}; calibrated per task: {met(study.calibrated)}"


def row_details(rows: Sequence[RowThreshold], label: str, how: str, members: str) -> list[str]:
    """What a per-cell column means, its count, and the cell and quantity behind each row."""
    passing = [t for t in rows if t.passing]
    out = ["", f"{label}: the same rows {how}",
           f"{label}: {sum(t.meets_goal for t in passing)} of {len(passing)} rows with a passing cell meet "
           f"the goal ({len(rows) - len(passing)} rows have none: every cell of theirs is a declared "
           "failure)"]
    for t in rows:
        where = (f"{t.members} of {t.passing} passing cells {members}; weakest {t.weakest}: "
                 f"{t.caught_by}" if t.passing else t.caught_by)
        out.append(f"  {t.task:<12} {t.precision:<5} {t.family:<6} {_row_error(t):>10}  {where}")
    return out


def _row_error(threshold: RowThreshold | None) -> str:
    if threshold is None:
        return ""
    if not threshold.passing:
        return "no cell"
    if threshold.at_most:
        return "<=1e-7"
    return _error(threshold)


def _error(threshold: Threshold | RowThreshold) -> str:
    if threshold.error is None:
        return "unseen"
    mark = "" if threshold.meets_goal else " !"
    return f"{threshold.error:.1e}{mark}"


def _caught(threshold: Threshold) -> str:
    if threshold.error is not None:
        return threshold.caught_by
    if threshold.scale_invariant:
        return "none: its optimizer (Adam family) is invariant to a uniform gradient scale"
    return f"none: {threshold.caught_by} (clipping, or a normalising step, undoes a uniform scale)"


def check_lines(checks: list[CellCheck], report_dir: Path) -> list[str]:
    failing = sorted((c for c in checks if not c.ok), key=lambda c: -c.tolerance_used)
    uncovered = [c for c in checks if c.ok and c.worst]
    out = ["", f"the passing cells of {report_dir} judged with each task's calibrated tolerance: "
           f"{len(checks) - len(failing)} of {len(checks)} hold "
           f"({len(uncovered)} not covered by the variants)"]
    out += [f"  {c.cell_id:<34} {c.tolerance_used:>5.1f}x  {c.worst}" for c in failing]
    if failing:
        out.append("  these cells land further from the golden than every benign variant: the variants miss "
                   "what their backend does, or the tolerance in force hides a bug; the per-task tolerances "
                   "are not ready to replace matrix.toml's")
    return out
