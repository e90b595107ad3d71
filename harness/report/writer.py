"""write_reports: every report file of one run, each written atomically (write_merged_reports:
those of `python -m harness report merge`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.atomic_files import write_text_atomic
from harness.errors import ReportDirError, explain
from harness.judge.outcome import CellResult
from harness.layout.report_dir import ReportDir
from harness.report.environment import RunEnvironment
from harness.report.html import render_html, render_merged_html
from harness.report.jsonfile import render_json, render_merged_json
from harness.report.junit import render_junit, render_merged_junit
from harness.report.markdown import render_markdown, render_merged_markdown
from harness.report.merged_report import MergedReport

Renderer = Callable[[Sequence[CellResult], dict[str, Any]], str]

# File name -> renderer. report.json first: it is the one a partial write would hurt most.
REPORT_FILES: dict[str, Renderer] = dict(
    zip(ReportDir.REPORTS, (render_json, render_junit, render_markdown, render_html), strict=True))
MERGED_REPORT_FILES: dict[str, Callable[[MergedReport], str]] = dict(
    zip(ReportDir.REPORTS, (render_merged_json, render_merged_junit, render_merged_markdown,
                            render_merged_html), strict=True))


def _write_all(rendered: dict[str, str], report_dir: Path, flag: str) -> None:
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
        for name, text in rendered.items():
            write_text_atomic(report_dir / name, text)
    except OSError as exc:
        raise ReportDirError(
            explain(
                f"report directory {str(report_dir)!r}",
                f"it cannot be written ({exc.strerror or exc})",
                "a directory you can create and write",
                f"pass another one with {flag}, or fix its permissions",
            )
        ) from exc


def write_reports(results: list[CellResult], environment: RunEnvironment | dict[str, Any],
                  report_dir: Path) -> None:
    """Write report.json, junit.xml, report.md and report.html into `report_dir`. `environment` is
    the run's (or, from a caller that has only that, report.json's environment block as is).

    Everything is rendered before anything is written, so a rendering bug cannot leave a mix of
    new and old files; each file then replaces its predecessor atomically (temp + os.replace).
    """
    block = environment.to_json() if isinstance(environment, RunEnvironment) else environment
    rendered = {name: render(results, block) for name, render in REPORT_FILES.items()}
    _write_all(rendered, Path(report_dir), "--report-dir")


def write_merged_reports(merged: MergedReport, out_dir: Path) -> None:
    """The merged report.json, junit.xml, report.md and report.html, the same way (all rendered
    first, each written atomically)."""
    rendered = {name: render(merged) for name, render in MERGED_REPORT_FILES.items()}
    _write_all(rendered, Path(out_dir), "--out")
