"""report.md stays readable as a GitHub job summary, measured on a report of the real matrix's
size (tests/harness/report/full_matrix.py: 390 cells, 240 of them CUDA cells skipped).

Limits, and why:
- SIZE: GitHub documents 1 MiB per step summary ($GITHUB_STEP_SUMMARY); above it the upload is
  aborted and the job shows no summary at all. Held by a green run and by one where every cell
  crashed with a long diagnosis (the diagnoses stop at markdown.MAX_DIAGNOSES).
- WIDTH: 160 characters. GitHub draws a summary in the run page's main column, about 1000-1200
  px on a 1280-1920 px screen; at its 14 px font a character is 7-8 px, so 150-odd fit, and 160
  is a wide terminal's `cat report.md`. Prose lines are measured as written. A table is measured
  as rendered: each column as wide as its widest line (a header's <br> starts a new line), plus
  3 for its border and padding; an emoji counts 2.
- LENGTH: 60 lines a reader sees without opening a <details>: the summary, the near misses,
  the numbers' counts and the grid. (Before: 90 rows of "not compared" came first.)
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

from harness.judge.outcome import CellResult, Status
from harness.plan.cell import Cell
from harness.report.markdown import MAX_DIAGNOSES, render_markdown
from tests.harness.report.full_matrix import ENVIRONMENT, NO_DEEPSPEED_HOST, full_matrix

SIZE = 1024 * 1024
WIDTH = 160
LENGTH = 60


def width(text: str) -> int:
    text = re.sub(r"<[^>]+>", "", text).replace("**", "").replace("`", "")
    return sum(0 if unicodedata.combining(ch) or ch == "\ufe0f" else 2 if unicodedata.category(ch) == "So"
               else 1 for ch in text)


def visible_lines(text: str) -> list[str]:
    """The lines outside every <details> block (what the summary shows before a click)."""
    shown, depth = [], 0
    for line in text.splitlines():
        depth += line.count("<details>")
        if depth == 0:
            shown.append(line)
        depth -= line.count("</details>")
    return shown


def table_width(rows: list[str]) -> int:
    cells = [row.strip().strip("|").split(" | ") for row in rows if not row.startswith("|---")]
    columns = max(len(c) for c in cells)
    return 1 + sum(3 + max(width(part) for c in cells if i < len(c) for part in c[i].split("<br>"))
                   for i in range(columns))


def widths(lines: list[str]) -> list[tuple[int, str]]:
    """(width, what) for each prose line and each table of `lines`."""
    found, table = [], []
    for line in [*lines, ""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            found.append((table_width(table), table[0][:60]))
            table = []
        found.append((width(line), line[:60]))
    return found


@pytest.mark.parametrize("name", ["deepspeed", "nodeepspeed"])
def test_a_full_matrix_report_md_fits_a_job_summary(name: str) -> None:
    """Both CPU jobs of CI: deepspeed compared with nodeepspeed's records, and nodeepspeed."""
    if name == "deepspeed":
        results = full_matrix(compare_records=Path("/reports/nodeepspeed"))
    else:
        results = full_matrix(NO_DEEPSPEED_HOST, environment=name)
    text = render_markdown(results, {**ENVIRONMENT, "name": name})
    assert len(text.encode()) < SIZE
    shown = visible_lines(text)
    assert len(shown) <= LENGTH, f"{len(shown)} lines before a click:\n" + "\n".join(shown)
    too_wide = [(w, what) for w, what in widths(shown) if w > WIDTH]
    assert not too_wide, too_wide
    assert any(what.startswith("| task |") for _, what in widths(shown)), "the grid was measured"


def test_a_failing_full_matrix_keeps_its_summary_under_1_mib() -> None:
    """A broken build: every cell crashes with a long stack. The table still lists every cell; the
    diagnoses stop at MAX_DIAGNOSES (unbounded, 390 of them passed 1 MiB)."""
    reason = ("rank 1 died (exit code -11, SIGSEGV) in the first optimizer step; its last output: "
              "Segmentation fault in libtorch_cpu.so [confirmed: rerun alone in a fresh launch, it failed "
              "the same way with a bit-identical record]")
    crashed = [CellResult(r.cell, Status.CRASHED, reason, detail="Traceback\n" + "  frame ...\n" * 800)
               for r in full_matrix()]
    text = render_markdown(crashed, ENVIRONMENT)
    assert len(text.encode()) < SIZE, f"{len(text.encode())} bytes"
    assert text.count(" diagnosis</summary>") == MAX_DIAGNOSES
    assert f"{390 - MAX_DIAGNOSES} more diagnoses are in report.html and junit.xml" in text
    problems = text[text.index("### Unexpected results: 390") : text.index("<details>")]
    assert problems.count("| ☠️ crashed |") == 390


def test_numbers_against_another_environment_lead_with_counts_and_fold_what_was_not_compared() -> None:
    results = full_matrix(compare_records=Path("/reports/nodeepspeed"))
    moved = next(r for r in results if r.id == "lm-cpu2-ddp-bf16")
    moved.extra["record_change"] = {"against": "nodeepspeed", "change": "within tolerance",
                                    "max_abs_diff": 3.1e-7, "first_difference": "state_dict/head.weight"}
    text = render_markdown(results, ENVIRONMENT)
    section = text[text.index("### Numbers against another environment") : text.index("### Grid")]
    lines = section.splitlines()
    counts = "numbers against nodeepspeed: 59 bit-identical, 1 within tolerance, 0 diverged, 90 not compared"
    assert lines[2].startswith(counts)  # the counts first
    assert "| `lm-cpu2-ddp-bf16` | within tolerance | 3.1e-07 | state_dict/head.weight |" in section
    assert "| not compared |" not in section and "nan" not in text  # no row, no value that does not exist
    assert ("<details><summary><b>90 not compared</b>: nodeepspeed has no record of them (they did not "
            "run there, or its records were not kept)</summary>") in section
    assert section.count("`regression-cpu2-zero1-fp32`") == 1 and section.count("-zero") == 90


def test_a_record_that_cannot_be_read_says_why_without_its_path() -> None:
    note = ("record /r/records/lm-cpu2-zero1-fp32.json: format_version 0 is not this harness's. "
            "Valid: 3. Fix: rerun")
    result = CellResult(Cell.from_id("lm-cpu2-zero1-fp32"), Status.PASSED, extra={"record_change": {
        "against": "old", "change": "not compared", "max_abs_diff": "nan", "first_difference": None,
        "note": note}})  # as read back from report.json: "nan", not NaN
    text = render_markdown([result], ENVIRONMENT)
    why = "the record of old cannot be read: format_version 0 is not this harness's"
    assert f"<b>1 not compared</b>: {why}</summary>" in text
    assert "/r/records" not in text and "nan" not in text
