"""Accelerate's behaviour x release table, built from report.json's cells (their statuses and the
[[expected]] entry each was judged by), never written by hand: a small synthetic set of reports."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.judge.cell_verdict import apply_expected
from harness.judge.outcome import CellResult, Status
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.plan.matrix_entries import Expected, Match
from harness.versions.implementation_table import behaviour_rows, columns, implementation_markdown

ZERO = Expected(Match({"implementation": ("accelerate",), "strategy": ("zero1", "zero2", "zero3")}),
                "failed", "cpu=True with a DeepSpeedPlugin runs DDP: no engine", index=2)
FP16 = Expected(Match({"implementation": ("accelerate",), "precision": ("fp16",)}),
                "failed", "fp16 on CPU trains fp32 with no scaler", index=5)
DROPOUT = Expected(Match({"task": ("dropout",), "processes": (2,)}), "failed",
                   "per-rank dropout masks on 2 processes", index=9)
CORE_ONLY = Expected(Match({"task": ("scalar",), "strategy": ("fsdp",)}), "exception",
                     "FSDP2 cannot shard 0-dim parameters", index=7)
EXPECTED = [ZERO, FP16, CORE_ONLY, DROPOUT]


@dataclass
class Report:
    name: str
    environment: dict[str, Any]
    results: list[CellResult] = field(default_factory=list)


def _cell(cell_id: str, status: Status, entry: int = 0, reason: str = "") -> CellResult:
    result = CellResult(Cell.from_id(cell_id), status=status, reason=reason)
    if entry:
        result.extra["expected_entry"] = entry
    return result


def _report(name: str, release: str, cells: list[CellResult], wall: float | None = 100.0) -> Report:
    environment: dict[str, Any] = {"name": name, "accelerate": release}
    if wall is not None:
        environment["startup"] = {"profile": {"wall_s": wall}}
    return Report(name, environment, cells)


NEW = _report("acc_new", "1.16.0", [
    _cell("lm-cpu2-zero3-fp32-accelerate", Status.XFAILED, 2),
    _cell("lm-cpu2-zero1-bf16-accelerate", Status.XFAILED, 2),
    _cell("lm-cpu2-ddp-fp16-accelerate", Status.XFAILED, 5),
    _cell("dropout-cpu2-ddp-fp32-accelerate", Status.XFAILED, 9),
    _cell("lm-cpu2-ddp-fp32-accelerate", Status.PASSED),
    _cell("lm-cpu2-zero3-fp32", Status.PASSED),  # a core cell: not this table's
], wall=114.4)
OLD = _report("acc_old", "1.12.0", [
    _cell("lm-cpu2-zero3-fp32-accelerate", Status.XFAILED, 2),
    _cell("lm-cpu2-zero1-bf16-accelerate", Status.XPASSED, 2),
    _cell("lm-cpu2-ddp-fp16-accelerate", Status.FAILED, 5, "loss leaves tolerance at step 0"),
    _cell("lm-cpu2-ddp-fp32-accelerate", Status.FAILED, 0, "weights leave tolerance"),
], wall=None)
CORE = _report("deepspeed_0_19", "not installed", [_cell("lm-cpu2-zero3-fp32", Status.PASSED)])


def test_columns_are_the_reports_with_cells_of_the_implementation_and_their_release() -> None:
    found = columns([NEW, CORE, OLD])  # type: ignore[list-item]
    assert [(c.name, c.release, len(c.results), c.wall_s) for c in found] == [
        ("acc_new", "1.16.0", 5, 114.4), ("acc_old", "1.12.0", 4, None)]


def test_each_entry_is_read_from_the_cells_it_judged_in_each_release() -> None:
    rows = dict(behaviour_rows(columns([NEW, OLD]), EXPECTED))  # type: ignore[list-item]
    titles = list(rows)
    assert titles[0].startswith("#2 [strategy zero1/zero2/zero3]: cpu=True with a DeepSpeedPlugin")
    assert rows[titles[0]] == ["present 2", "present 1, fixed 1"]
    assert titles[1].startswith("#5 [precision fp16]")
    assert rows[titles[1]][0] == "present 1"
    assert rows[titles[1]][1].startswith("other 1 (first lm-cpu2-ddp-fp16-accelerate: failed: loss leaves")
    # a core-wide entry appears once an Accelerate cell was judged by it; one none was is left out
    assert titles[2].startswith("#9 [task dropout, processes 2]")
    assert rows[titles[2]] == ["present 1", "not declared"]
    assert not any(t.startswith("#7") for t in titles)
    assert rows[titles[-1]] == ["passed 1", "passed 0, failed 1 (first lm-cpu2-ddp-fp32-accelerate: failed: "
                                            "weights leave tolerance)"]


def test_the_markdown_has_a_column_per_release_the_counts_and_the_wall_time() -> None:
    lines = implementation_markdown([NEW, CORE, OLD], EXPECTED)  # type: ignore[list-item]
    assert lines[0] == ("| behaviour (matrix.toml `[[expected]]`) | `acc_new` (accelerate 1.16.0) "
                        "| `acc_old` (accelerate 1.12.0) |")
    assert "| passed / declared failures / failed | 1 / 4 / 0 | 0 / 1 / 3 |" in lines
    assert lines[-1] == "| wall s | 114 | ? |"
    assert implementation_markdown([CORE], EXPECTED) == []  # type: ignore[list-item]


def test_an_entry_the_matrix_no_longer_has_still_gets_its_row() -> None:
    stray = _report("acc_x", "1.15.0", [_cell("lm-cpu2-zero3-fp32-accelerate", Status.XFAILED, 42)])
    rows = dict(behaviour_rows(columns([stray]), EXPECTED))  # type: ignore[list-item]
    assert rows["#42 (not in this matrix.toml)"] == ["present 1"]


def test_the_judge_records_which_entry_a_cell_was_judged_by() -> None:
    matrix = load_matrix()
    cell = next(c for c in matrix.cells if c.id == "lm-cpu2-zero3-fp32-accelerate")
    entry = matrix.expected_outcome(cell)
    assert entry is not None and entry.index == matrix.expected.index(entry) + 1
    declared = apply_expected(CellResult(cell, Status.FAILED, reason="the run had no DeepSpeed engine "
                                         "(accelerate MULTI_CPU ran)"), entry)
    assert (declared.status, declared.extra["expected_entry"]) == (Status.XFAILED, entry.index)
    fixed = apply_expected(CellResult(cell, Status.PASSED), entry)
    assert (fixed.status, fixed.extra["expected_entry"]) == (Status.XPASSED, entry.index)
    assert "expected_entry" not in apply_expected(CellResult(cell, Status.PASSED), None).extra


def test_versions_table_prints_it_from_report_dirs(tmp_path: Path, capsys: Any) -> None:
    from harness.cli.main import main

    matrix = load_matrix()  # the repository's entries name the rows: number the cells by them
    cell = next(c for c in matrix.cells if c.id == "lm-cpu2-zero3-fp32-accelerate")
    zero = next(e for e in matrix.expected if e.match.matches(cell) and e.accelerate_versions is None)
    for report in (NEW, OLD):
        directory = tmp_path / report.name
        directory.mkdir()
        cells = [r.to_json() for r in report.results]
        for entry in cells:
            if entry["extra"].get("expected_entry") == ZERO.index:
                entry["extra"]["expected_entry"] = zero.index
        data = {"schema_version": 1, "environment": report.environment, "cells": cells}
        (directory / "report.json").write_text(json.dumps(data), encoding="utf-8")
    assert main(["versions", "table", str(tmp_path / "acc_new"), str(tmp_path / "acc_old")]) == 0
    out = capsys.readouterr().out
    assert "| behaviour (matrix.toml `[[expected]]`) | `acc_new` (accelerate 1.16.0) |" in out
    assert re.search(r"\| #\d+ \[strategy zero1/zero2/zero3\]: .* \| present 2 \| present 1, fixed 1 \|", out)
