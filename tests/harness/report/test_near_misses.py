"""Near misses (passed cells at 80% or more of a tolerance) are in the summary of every format:
report.json's "near_misses", report.md and report.html under the headline, junit.xml's suite
properties, the terminal's closing lines; each with its quantity and share."""

from __future__ import annotations

import io
import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.judge.outcome import CellResult, Comparison, Status
from harness.plan.cell import Cell
from harness.report import print_summary, write_reports
from harness.report.near_miss import NEAR_MISS_SHARE, near_misses
from harness.report.text import percent
from tests.harness.report.full_matrix import ENVIRONMENT, NEAR_MISS, full_matrix

CONTRACT = {"summary", "environment", "cells"}
CELL_KEYS = {"id", "task", "device", "strategy", "processes", "precision", "status", "reason", "duration_s",
             "comparisons"}
COMPARISON_KEYS = {"quantity", "ok", "max_abs_diff", "max_rel_diff", "atol", "rtol", "first_divergence"}
LINE = f"{NEAR_MISS}: losses at 95% of its tolerance"


def cell(cell_id: str, status: Status, *shares: float) -> CellResult:
    comparisons = [Comparison(f"q{i}", status is Status.PASSED, 1e-6, 1e-6, 1e-5, 1e-3, tolerance_used=s)
                   for i, s in enumerate(shares)]
    return CellResult(Cell.from_id(cell_id), status=status, comparisons=comparisons)


def test_near_misses_are_passed_cells_at_or_above_the_share_closest_first() -> None:
    results = [
        cell("a-cpu1-single-fp32", Status.PASSED, 0.1, 0.85),  # its margin is its largest share
        cell("b-cpu1-single-fp32", Status.PASSED, 0.79),  # below: not a near miss
        cell("c-cpu1-single-fp32", Status.PASSED, NEAR_MISS_SHARE),  # exactly at the threshold: is one
        cell("d-cpu1-single-fp32", Status.FAILED, 3.0),  # failed: a miss, not a near one
        cell("e-cpu1-single-fp32", Status.XFAILED, 0.9),
        cell("f-cpu1-single-fp32", Status.PASSED),  # no comparison at all
        cell("g-cpu1-single-fp32", Status.PASSED, 0.999),
    ]
    found = [(m.id, m.quantity, m.share) for m in near_misses(results)]
    assert found == [("g-cpu1-single-fp32", "q0", 0.999), ("a-cpu1-single-fp32", "q1", 0.85),
                     ("c-cpu1-single-fp32", "q0", 0.8)]
    assert near_misses(results)[0].text == "q0 at 100% of its tolerance"  # never "1e+02%"
    comparison = Comparison("losses", True, 0.0, 0.0, 0.0, 0.0, tolerance_used=math.nan)
    unknown = CellResult(Cell.from_id("h-cpu1-single-fp32"), Status.PASSED, comparisons=[comparison])
    assert near_misses([unknown])[0].text == "losses at an unknown share"  # never a comfortable margin


def test_percent_keeps_two_digits_below_ten_and_whole_numbers_above() -> None:
    assert [percent(v) for v in (0.0031, 0.095, 0.12, 0.95, 0.9996, 250.0)] == [
        "0.31%", "9.5%", "12%", "95%", "100%", "25000%"]  # fmt: skip


def test_every_format_lists_the_near_miss_in_its_summary(tmp_path: Path) -> None:
    write_reports(full_matrix(), ENVIRONMENT, tmp_path)

    data = json.loads((tmp_path / "report.json").read_text())
    assert set(data) >= CONTRACT, "the contract's keys stay"
    assert all(set(c) >= CELL_KEYS and all(set(q) >= COMPARISON_KEYS for q in c["comparisons"])
               for c in data["cells"])
    assert data["near_misses"] == {"threshold": 0.8, "count": 1, "cells": [
        {"id": NEAR_MISS, "quantity": "losses", "share": 0.95, "environment": "deepspeed"}]}  # fmt: skip

    md = (tmp_path / "report.md").read_text()
    head = md[: md.index("### Grid")]
    assert "— ✅ no cell failed unexpectedly · ⚠️ 1 near miss" in head.splitlines()[2]  # the summary line
    assert f"- `{LINE.replace(':', '`:', 1)}" in head

    page = (tmp_path / "report.html").read_text()
    box = page[page.index('id="near-misses"') : page.index("<table>")]  # above the grid
    assert f'href="#cell-{NEAR_MISS}"' in box and "losses at 95% of its tolerance" in box
    assert "passed at 80% or more of a tolerance" in box

    props = {(p.get("name"), p.get("value")) for p in ET.parse(tmp_path / "junit.xml").iter("property")}
    assert ("near_miss", LINE) in props
    assert ("near_misses", "1 near miss (passed at 80% or more of a tolerance)") in props


def test_the_terminal_closes_with_the_near_misses() -> None:
    stream = io.StringIO()
    print_summary(full_matrix(), stream=stream)
    lines = stream.getvalue().rstrip().splitlines()
    assert "(390 cells)" in lines[-3]  # the headline, then the near misses
    assert lines[-2] == "1 near miss (passed at 80% or more of a tolerance):"
    assert lines[-1].split() == [NEAR_MISS, "losses", "at", "95%", "of", "its", "tolerance"]


def test_a_run_without_near_misses_says_so_quietly(tmp_path: Path) -> None:
    write_reports([cell("a-cpu1-single-fp32", Status.PASSED, 0.5)], ENVIRONMENT, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())["near_misses"]["cells"] == []
    md = (tmp_path / "report.md").read_text()
    assert "No near miss: no cell passed at 80% or more of a tolerance." in md
    stream = io.StringIO()
    print_summary([cell("a-cpu1-single-fp32", Status.PASSED, 0.5)], stream=stream)
    assert "near miss" not in stream.getvalue()


def test_a_merged_report_names_each_near_miss_environment(tmp_path: Path) -> None:
    from harness.report.merge_reports import merge_report_dirs

    for name, share in (("nodeepspeed", 0.5), ("deepspeed", 0.9)):
        one = cell("lm-cpu1-single-fp32", Status.PASSED, share)
        one.environment = name
        write_reports([one], {**ENVIRONMENT, "name": name}, tmp_path / name)
    merge_report_dirs([tmp_path / "nodeepspeed", tmp_path / "deepspeed"], tmp_path / "merged")
    data = json.loads((tmp_path / "merged" / "report.json").read_text())
    assert data["near_misses"]["cells"] == [
        {"id": "lm-cpu1-single-fp32", "quantity": "q0", "share": 0.9, "environment": "deepspeed"}]
    md = (tmp_path / "merged" / "report.md").read_text()
    assert "- `lm-cpu1-single-fp32` in `deepspeed`: q0 at 90% of its tolerance" in md
    page = (tmp_path / "merged" / "report.html").read_text()
    assert 'href="#cell-deepspeed.lm-cpu1-single-fp32"' in page[: page.index("<table>")]
