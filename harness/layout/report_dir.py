"""The report folder a run leaves (`--report-dir`), read back by --resume, --compare-records,
`report merge`, the shard planner and the version sweep. Its file names are a public contract
(docs/reading-the-report.md): programs and CI steps open them by name.

    report.json  junit.xml  report.md  report.html   the reports (harness.report.writer)
    startup.json        the launches' start-up and the run's profile (also in report.json)
    records/<id>.json|.safetensors                   each cell's record, as the main rank saved it
    checkpoints/<name>/ resume cells' checkpoints, beside the records they were saved with
    reruns/records/     the records of the reruns that confirm a failure (harness.run.confirm)
    launches/<shape>-NNN/                            each launch's directory (LaunchDir)
    cells/<id>/         script mode: each backend's own folder
    behaviours.json  version_status.json  sweep_times.json   the version sweep (docs/versions.md)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

RECORD_SUFFIXES = (".json", ".safetensors")  # a record is its JSON and its tensors


@dataclass(frozen=True)
class ReportDir:
    root: Path

    # The reports, in the order they are written: report.json first, the one a partial write
    # would hurt most (harness.report.writer).
    REPORT_JSON = "report.json"
    JUNIT_XML = "junit.xml"
    REPORT_MD = "report.md"
    REPORT_HTML = "report.html"
    REPORTS = (REPORT_JSON, JUNIT_XML, REPORT_MD, REPORT_HTML)

    @property
    def report_json(self) -> Path:
        return self.root / self.REPORT_JSON

    @property
    def report_md(self) -> Path:
        return self.root / self.REPORT_MD

    @property
    def report_html(self) -> Path:
        return self.root / self.REPORT_HTML

    @property
    def startup(self) -> Path:
        return self.root / "startup.json"

    @property
    def behaviours(self) -> Path:
        return self.root / "behaviours.json"

    @property
    def version_status(self) -> Path:
        return self.root / "version_status.json"

    @property
    def sweep_times(self) -> Path:
        """Seconds per phase of a version sweep's environment (written by its nox session)."""
        return self.root / "sweep_times.json"

    # Records, checkpoints and the reruns' records.
    @property
    def records(self) -> Path:
        return self.root / "records"

    def record(self, cell_id: str) -> Path:
        """A record's stem: Record.save/load add RECORD_SUFFIXES."""
        return self.records / cell_id

    @property
    def rerun_records(self) -> Path:
        return self.root / "reruns" / "records"

    @staticmethod
    def checkpoints_beside(records_dir: Path) -> Path:
        """A run's checkpoints live beside its records (`checkpoints/<name>/`); a rank knows only
        where its records go, so the checkpoints are found from there."""
        return records_dir.parent / "checkpoints"

    @staticmethod
    def forget_records(records_dir: Path, stems: list[str]) -> None:
        """Delete these records: a stale one of an earlier run must never be judged as this run's."""
        for stem in stems:
            for suffix in RECORD_SUFFIXES:
                (records_dir / (stem + suffix)).unlink(missing_ok=True)

    # Launch directories and script mode's folders.
    @property
    def launches(self) -> Path:
        return self.root / "launches"

    def launch_dir(self, name: str) -> Path:
        return self.launches / name

    def cell_dir(self, cell_id: str) -> Path:
        return self.root / "cells" / cell_id

    def write_probe(self) -> Path:
        """A file that shows the folder can be written (deleted at once)."""
        return self.root / f".write-probe-{os.getpid()}"
