"""What `python -m harness report merge` renders: the reports of several environments as one.

Data only (the renderers import it; reading the directories and comparing records is
harness/report/merge_reports.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.judge.outcome import CellResult
from harness.report.summary import ok, unexpected

if TYPE_CHECKING:  # harness.versions.table reads report helpers: importing it here closes a loop
    from harness.versions.table import VersionRow

MERGED_SEPARATOR = "+"  # the merged report's environment name: "nodeepspeed+deepspeed"


@dataclass
class EnvironmentReport:
    """One input: a report directory written by `python -m harness run` in one environment, or
    the shards of one environment joined (harness.shard.combine)."""

    name: str  # report.json's environment.name
    directory: Path  # a joined environment: its first shard's
    environment: dict[str, Any]  # report.json's "environment" block, as written (joined: see combine)
    results: list[CellResult]  # each with .environment set (to `name` where the run left it empty)
    # Joined shards: each shard's report dir, by shard (1..N), and where each cell's record is.
    shard_dirs: list[Path] = field(default_factory=list)
    record_dirs: dict[str, Path] = field(default_factory=dict)

    def record_dir(self, cell_id: str) -> Path:
        """The report dir holding this cell's record (records/ under it)."""
        return self.record_dirs.get(cell_id, self.directory)

    @property
    def where(self) -> str:
        """Its report dir(s), for the terminal."""
        if not self.shard_dirs:
            return str(self.directory)
        return f"{len(self.shard_dirs)} shards: " + ", ".join(str(d) for d in self.shard_dirs)


@dataclass(frozen=True)
class CrossCheck:
    """A non-DeepSpeed cell's record in one environment against its record in a baseline one
    (`harness.judge.cell_verdict.cross_environment`: every tensor bit for bit, and the skipped steps)."""

    cell_id: str
    baseline: str  # environment name whose record is the reference (the first input holding one)
    other: str
    identical: bool
    note: str  # "bit-identical to ... (N tensors)" or "differs from ...: losses, ..." or why not read
    first_difference: str | None = None
    max_abs_diff: float = 0.0

    @property
    def verdict(self) -> str:
        return "bit-identical" if self.identical else "differs"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.cell_id,
            "environments": [self.baseline, self.other],
            "identical": self.identical,
            "verdict": self.verdict,
            "first_difference": self.first_difference,
            "max_abs_diff": self.max_abs_diff,
            "note": self.note,
        }


@dataclass
class MergedReport:
    inputs: list[EnvironmentReport]
    cross: list[CrossCheck] = field(default_factory=list)
    # The version sweep's inputs (those with version_status.json; docs/versions.md): one row per
    # environment, and environment -> its behaviours.json (behaviour x version).
    versions: list[VersionRow] = field(default_factory=list)
    behaviours: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [report.name for report in self.inputs]

    @property
    def name(self) -> str:
        return MERGED_SEPARATOR.join(self.names)

    @property
    def results(self) -> list[CellResult]:
        """Every input cell, inputs in the order given, each input's cells in its own order."""
        return [result for report in self.inputs for result in report.results]

    @property
    def environment(self) -> dict[str, Any]:
        """report.json's "environment" of the merged report: what it was merged from."""
        return {"name": self.name, "merged_from": self.names}

    @property
    def differing(self) -> list[CrossCheck]:
        return [check for check in self.cross if not check.identical]

    @property
    def unsupported(self) -> set[str]:
        """Environments of a release the core refuses (or cannot install / import): their cells ran
        only to measure the release, so their failures are the finding, not a regression."""
        return {row.environment for row in self.versions if row.status == "not supported"}

    @property
    def judged_results(self) -> list[CellResult]:
        return [r for r in self.results if r.environment not in self.unsupported]

    @property
    def gate_disagreements(self) -> list[str]:
        """"env: behaviour" where a core patch's gate disagrees with the DeepSpeed-alone reproduction."""
        return [f"{env}: {b.get('behaviour')}" for env, data in self.behaviours.items()
                for b in data.get("behaviours", []) if b.get("gate_agrees") is False]

    @property
    def ok(self) -> bool:
        """The one verdict: no cell failed unexpectedly (outside unsupported environments), no
        cross-environment record differs, and every core patch's gate agrees with its reproduction."""
        return ok(self.judged_results) and not self.differing and not self.gate_disagreements

    @property
    def verdict(self) -> str:
        """The verdict in words, e.g. "2 cell(s) failed unexpectedly; 1 cross-environment
        comparison(s) differ"."""
        if self.ok:
            words = "no cell failed unexpectedly"
            measured = len(unexpected(self.results)) - len(unexpected(self.judged_results))
            if measured:
                words += (f" outside {len(self.unsupported)} unsupported environment(s), whose "
                          f"{measured} failing cell(s) are their finding (the version table)")
            if not self.cross:
                return words
            identical = f"{len(self.cross)} cross-environment comparison(s) bit-identical"
            return f"{words}; {identical}"
        parts = []
        failed = len(unexpected(self.judged_results))
        if failed:
            parts.append(f"{failed} cell(s) failed unexpectedly")
        if self.differing:
            parts.append(f"{len(self.differing)} cross-environment comparison(s) differ")
        if self.gate_disagreements:
            disagreeing = ", ".join(self.gate_disagreements)
            parts.append(f"a core patch's gate disagrees with DeepSpeed: {disagreeing}")
        return "; ".join(parts)
