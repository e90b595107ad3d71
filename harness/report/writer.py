"""write_reports: every report file of one run, each written atomically."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.atomic_files import write_text_atomic
from harness.errors import ReportDirError, explain
from harness.report.html import render_html
from harness.report.jsonfile import render_json
from harness.report.junit import render_junit
from harness.report.markdown import render_markdown
from harness.truth.outcome import CellResult

Renderer = Callable[[Sequence[CellResult], dict[str, Any]], str]

# File name -> renderer. report.json first: it is the one a partial write would hurt most.
REPORT_FILES: dict[str, Renderer] = {
    "report.json": render_json,
    "junit.xml": render_junit,
    "report.md": render_markdown,
    "report.html": render_html,
}




def write_reports(results: list[CellResult], environment: dict[str, Any], report_dir: Path) -> None:
    """Write report.json, junit.xml, report.md and report.html into `report_dir`.

    Everything is rendered before anything is written, so a rendering bug cannot leave a mix of
    new and old files; each file then replaces its predecessor atomically (temp + os.replace).
    """
    report_dir = Path(report_dir)
    rendered = {name: render(results, environment) for name, render in REPORT_FILES.items()}
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
                "pass another one with --report-dir, or fix its permissions",
            )
        ) from exc
