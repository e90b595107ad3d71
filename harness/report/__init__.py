"""Reports of a matrix run: terminal progress and table, report.json, junit.xml, report.md, HTML.

Public API (the runner and the CLI call these; keep the signatures stable):

- :func:`write_reports` writes every file of a report directory, each atomically.
- :func:`environment_info` describes where the run happened (versions, devices, platform): a
  :class:`RunEnvironment`, to which the run adds its own facts.
- :class:`Progress` is the live progress bar (plain lines when not a TTY or under CI).
- :func:`print_summary` prints the final table.
"""

from __future__ import annotations

from harness.report.environment import RunEnvironment, environment_info
from harness.report.terminal import Progress, print_summary
from harness.report.writer import REPORT_FILES, write_reports

__all__ = ["REPORT_FILES", "Progress", "RunEnvironment", "environment_info", "print_summary", "write_reports"]
