"""The kill matrix: each catalog entry run on every CPU cell whose code path it touches
(`Bug.affected`), and judged cell by cell: caught in N of M affected cells.

A trial (harness.sensitivity.trial) asks whether a bug is seen at all, on the entry's smallest
selection. The kill matrix asks where it is seen: a bug caught on one hand-picked cell and
missed by the other cells it touches is a weaker net than its "caught" suggests. The affected
cells run in shared launches (a failing cell is confirmed in a fresh one, as in any run), against
the same patched copy of the core; only cells that passed in the control (the unpatched copy on
the union of affected cells) count, and a miss keeps its closest comparison, so that each one can
be explained.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.calibrate.exact_judge import EXACT_PREFIX
from harness.sensitivity.bug import Bug, CatalogError, patched_copy
from harness.sensitivity.trial import JUDGED_FAILURES, Control, closest_comparison, run_cells

# An entry is subtle when no cell that catches it sees it at more than this many times its
# tolerance: a bug that a tolerance 10x wider would miss everywhere (issue: at least 15 such).
SUBTLE_BELOW = 10.0


@dataclass
class KillRow:
    """One entry's kill-matrix row: what each affected cell that passed in the control did."""

    bug: Bug
    caught: list[str] = field(default_factory=list)
    missed: dict[str, str] = field(default_factory=dict)  # cell -> its closest comparison
    broke: dict[str, str] = field(default_factory=dict)  # cell -> status and reason (raised, crashed)
    unproven: list[str] = field(default_factory=list)  # failed or did not run in the control
    # caught cell -> its effect: the largest share of a tolerance among its comparisons (inf for
    # a catch on evidence, or on a shape or dtype no tolerance can bridge)
    effect: dict[str, float] = field(default_factory=dict)
    # caught cells whose only failing comparisons were the exact tier's (`--exact`): inside every
    # tolerance, seen only because the cell is not bit-identical to its reference
    exact_only: list[str] = field(default_factory=list)
    error: str = ""  # a catalog error (the patch did not apply, nothing ran)
    seconds: float = 0.0

    @property
    def affected(self) -> int:
        return len(self.caught) + len(self.missed) + len(self.broke)

    @property
    def tolerance_effects(self) -> list[float]:
        """The effects of the catches a tolerance (or evidence) made. A catch by the exact tier
        alone stayed inside every tolerance: it says nothing about how tight they are, so it
        counts neither as a small effect nor as a large one."""
        return [value for cell, value in self.effect.items() if cell not in self.exact_only]

    @property
    def largest_effect(self) -> float:
        """The strongest catch a tolerance made, in multiples of it (0.0 when it made none)."""
        return max(self.tolerance_effects, default=0.0)

    @property
    def caught_within(self) -> int:
        """How many of its caught cells it moved by less than SUBTLE_BELOW times the tolerance:
        those cells' tolerances are what stops a bug of this size."""
        return sum(1 for value in self.tolerance_effects if value < SUBTLE_BELOW)

    @property
    def subtle(self) -> bool:
        """Caught by a tolerance, and only within SUBTLE_BELOW times it wherever a tolerance caught it."""
        return bool(self.tolerance_effects) and self.largest_effect < SUBTLE_BELOW

    def line(self) -> str:
        if self.error:
            return f"{self.bug.name}: CATALOG ERROR {self.error}"
        text = f"{self.bug.name}: caught in {len(self.caught)} of {self.affected} affected cells"
        extras = [f"{len(self.broke)} raised or crashed"] if self.broke else []
        extras += [f"{len(self.unproven)} not counted (did not pass in the control)"] if self.unproven else []
        if self.tolerance_effects:
            subtle = " (subtle)" if self.subtle else ""
            strongest = ("on evidence, shape or an exact comparison" if self.largest_effect == float("inf")
                         else f"at most {self.largest_effect:.3g}x the tolerance{subtle}")
            within = f", under {SUBTLE_BELOW:g}x in {self.caught_within} of {len(self.caught)}" \
                if self.caught_within and not self.subtle else ""
            extras.append(f"effect {strongest}{within}")
        if self.exact_only:
            extras.append(f"{len(self.exact_only)} by the exact tier alone")
        return text + (f" ({'; '.join(extras)})" if extras else "") + f", -k {self.bug.affected!r}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.bug.name, "affects": self.bug.affected, "caught": self.caught,
                "missed": self.missed, "broke": self.broke, "unproven": self.unproven,
                "effect": {cell: (None if value == float("inf") else round(value, 3))
                           for cell, value in self.effect.items()},
                "subtle": self.subtle, "caught_within_10x": self.caught_within,
                "caught_by_exact_tier_alone": self.exact_only,
                "error": self.error, "seconds": round(self.seconds, 1)}


def judge_cells(bug: Bug, report: dict[str, Any], control: Control) -> KillRow:
    """Sort the cells of a patched run of `bug`'s affected cells into the row."""
    row = KillRow(bug)
    for cell in report.get("cells", []):
        status = cell.get("status")
        if status == "skipped":
            continue
        if cell["id"] not in control.passed:
            row.unproven.append(cell["id"])
        elif status == "failed" and cell.get("failure") in JUDGED_FAILURES:
            row.caught.append(cell["id"])
            row.effect[cell["id"]] = catch_effect(cell)
            if caught_by_the_exact_tier_alone(cell):
                row.exact_only.append(cell["id"])
        elif status == "passed":
            row.missed[cell["id"]] = closest_comparison(cell)[1]
        else:
            row.broke[cell["id"]] = f"{status}: {str(cell.get('reason', ''))[:200]}"
    if not row.affected and not row.unproven:
        row.error = f"-k {bug.affected!r} ran no cell here"
    return row


def catch_effect(cell: dict[str, Any]) -> float:
    """How far a caught cell's numbers moved, in multiples of their tolerance: the largest
    `tolerance_used` of its comparisons (the exact tier's, at tolerance 0, left out: for a catch
    by the exact tier alone this is how far inside every tolerance it stayed); inf when it failed
    on evidence or on a comparison at tolerance 0 (no number to scale)."""
    if cell.get("failure") == "evidence":
        return float("inf")
    used = [float("inf") if _exact_and_failed(c) else _share(c.get("tolerance_used"))
            for c in cell.get("comparisons", []) if not str(c.get("quantity", "")).startswith(EXACT_PREFIX)]
    return max(used, default=float("inf"))


def _exact_and_failed(comparison: dict[str, Any]) -> bool:
    """A failed comparison at tolerance 0 (loss scales, skipped steps): any difference is no
    multiple of a tolerance (report.json has it as difference / 1e-300)."""
    return (not comparison.get("ok", True) and comparison.get("atol") == 0
            and comparison.get("rtol") == 0)


def _share(value: Any) -> float:
    """A tolerance share read back from report.json, where a non-finite one is the string "inf"
    or "nan" (JSON has neither): unknown counts as infinite, never as a small effect."""
    try:
        share = float(value)
    except (TypeError, ValueError):
        return float("inf")
    return share if math.isfinite(share) else float("inf")


def caught_by_the_exact_tier_alone(cell: dict[str, Any]) -> bool:
    """A failed cell every one of whose failing comparisons is the exact tier's (`exact:...`)."""
    failing = [c["quantity"] for c in cell.get("comparisons", []) if not c.get("ok", True)]
    return bool(failing) and all(q.startswith(EXACT_PREFIX) for q in failing)


def kill_row(bug: Bug, *, timeout_s: float, control: Control, keep: Path | None = None,
             exact: bool = False) -> KillRow:
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"kill-{bug.name}-") as tmp:
        try:
            workdir = patched_copy(bug, Path(tmp))
            report = run_cells(f"kill-{bug.name}", bug.affected, workdir, timeout_s, keep, isolate=False,
                               exact=exact)
            row = judge_cells(bug, report, control)
        except CatalogError as exc:
            row = KillRow(bug, error=str(exc))
    row.seconds = time.monotonic() - start
    return row


def summary_lines(rows: list[KillRow]) -> list[str]:
    """The kill matrix as text: a line per entry, then every miss with its closest comparison."""
    lines = [row.line() for row in rows]
    caught = sum(len(row.caught) for row in rows)
    affected = sum(row.affected for row in rows)
    lines.append(f"kill matrix: {len(rows)} entries, caught in {caught} of {affected} affected cells; "
                 f"entries caught nowhere: {sum(1 for r in rows if not r.caught and not r.error)}; "
                 f"subtle (caught, under {SUBTLE_BELOW:g}x the tolerance wherever caught): "
                 f"{sum(1 for r in rows if r.subtle)}; caught within {SUBTLE_BELOW:g}x in some cell: "
                 f"{sum(1 for r in rows if r.caught_within)}; missed nowhere (caught in every cell that "
                 f"did not raise): {sum(1 for r in rows if r.caught and not r.missed)}")
    for row in rows:
        for cell, closest in row.missed.items():
            lines.append(f"  missed {row.bug.name} on {cell}; closest: {closest}")
        for cell, why in row.broke.items():
            lines.append(f"  raised {row.bug.name} on {cell}: {why}")
    return lines
