"""`python -m harness report merge DIR... --out DIR`: several environments' reports as one, with the
cross-environment comparison of records and one verdict (exit 0 / 1 / 2)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from harness.cli.main import main
from harness.golden.golden_store import load_golden
from harness.judge.outcome import CellResult, Comparison, Status
from harness.plan.cell import Cell
from harness.record.record_format import Record
from harness.report import write_reports

# Reads the goldens: run again against goldens made elsewhere (nox -s foreign_goldens).
pytestmark = pytest.mark.goldens

SINGLE = "regression-cpu1-single-fp32"


def result(cell_id: str, status: Status, env: str, reason: str = "", **kw: object) -> CellResult:
    return CellResult(Cell.from_id(cell_id), status=status, reason=reason, environment=env, **kw)  # type: ignore[arg-type]


def env_block(name: str, deepspeed: str) -> dict[str, object]:
    return {"name": name, "python": "3.11.7", "torch": "2.13.0+cpu", "deepspeed": deepspeed, "cpu_count": 2}


def write_env(directory: Path, name: str, deepspeed: bool, fail: bool = False) -> Path:
    """A small run of one environment, as `python -m harness run` would leave it."""
    used = Comparison("losses", True, 1e-7, 1e-7, 1e-5, 1e-3, tolerance_used=0.25)
    ds_status = (Status.FAILED if fail else Status.PASSED) if deepspeed else Status.SKIPPED
    results = [
        result(SINGLE, Status.PASSED, name, comparisons=[used], duration_s=1.0),
        result("regression-cpu2-ddp-fp32", Status.PASSED, name, comparisons=[used]),
        result("regression-cpu2-zero1-fp32", ds_status, name if deepspeed else "",
               "" if deepspeed else "deepspeed is not installed",
               comparisons=[used] if deepspeed and not fail else []),
        result("lm-cpu1-single-fp32", Status.PASSED, name, comparisons=[used]),
        result("regression-cuda2-ddp-fp32", Status.SKIPPED, "", "needs 2 CUDA devices, found 0"),
    ]
    if fail:
        results[2].reason = "losses left tolerance at step 3"
    write_reports(results, env_block(name, "0.19.8" if deepspeed else "not installed"), directory)
    return directory


def merge(*args: object) -> int:
    return main(["report", "merge", *map(str, args)])


class _Rows(HTMLParser):
    """The grid's row labels: (environment, task) per <tr> (the environment header spans rows)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._th = False
        self._in_grid = True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr" and self._in_grid:
            self.rows.append([])
        if tag == "th":
            self._th = self._in_grid

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_grid = False  # the first table is the grid
        if tag == "th":
            self._th = False

    def handle_data(self, data: str) -> None:
        if self._th and self.rows and data.strip():
            self.rows[-1].append(data.strip())


def test_merge_writes_one_report_with_a_row_per_environment_and_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nods = write_env(tmp_path / "nods", "nodeepspeed", deepspeed=False)
    ds = write_env(tmp_path / "ds", "deepspeed", deepspeed=True)
    out = tmp_path / "merged"
    assert merge(nods, ds, "--out", out) == 0
    assert "ok: no cell failed unexpectedly" in capsys.readouterr().out

    data = json.loads((out / "report.json").read_text())
    one = json.loads((nods / "report.json").read_text())
    assert set(one) <= set(data), "the merged report.json keeps every top-level key"
    assert [e["name"] for e in data["environments"]] == ["nodeepspeed", "deepspeed"]
    assert data["environments"][1]["deepspeed"] == "0.19.8"
    assert data["environment"]["name"] == "nodeepspeed+deepspeed"
    assert data["total"] == 10 and len(data["cells"]) == 10 and data["ok"] is True
    assert data["summary"] == {
        "passed": 7, "failed": 0, "skipped": 3, "xfailed": 0,
        "xpassed": 0, "error": 0, "timeout": 0, "crashed": 0,
    }  # fmt: skip
    # Every cell keeps its environment (a skipped one the run left unnamed gets its input's name).
    assert [c["environment"] for c in data["cells"]] == ["nodeepspeed"] * 5 + ["deepspeed"] * 5
    assert data["cross_environment"] == []  # no records in these dirs: nothing to compare

    page = (out / "report.html").read_text()
    parser = _Rows()
    parser.feed(page)
    header, *rows = parser.rows
    assert header[:2] == ["environment", "task"] and "cpu1-single-fp32" in header
    assert rows == [["nodeepspeed", "regression"], ["lm"], ["deepspeed", "regression"], ["lm"]]
    assert page.count('rowspan="2"') == 2
    # One cell id per environment: each has its own anchor, and the grid links to both.
    assert f'id="cell-nodeepspeed.{SINGLE}"' in page and f'id="cell-deepspeed.{SINGLE}"' in page
    assert page.count("<table>") >= 2 and "Cross-environment comparison (0 bit-identical, 0 differ)" in page

    md = (out / "report.md").read_text()
    assert "| nodeepspeed | regression | ✅ | ✅ | ⏭️ | ⏭️ |" in md
    assert "| deepspeed | regression | ✅ | ✅ | ✅ | ⏭️ |" in md
    suites = ET.parse(out / "junit.xml").getroot().findall("testsuite")
    names = ["matrix[nodeepspeed]", "matrix[deepspeed]", "cross_environment"]
    assert [s.get("name") for s in suites] == names
    assert [s.get("tests") for s in suites] == ["5", "5", "0"]


def test_an_unexpected_failure_in_any_input_fails_the_merge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nods = write_env(tmp_path / "nods", "nodeepspeed", deepspeed=False)
    ds = write_env(tmp_path / "ds", "deepspeed", deepspeed=True, fail=True)
    assert merge(nods, ds, "--out", tmp_path / "merged") == 1
    printed = capsys.readouterr().out
    assert "FAILED: 1 cell(s) failed unexpectedly" in printed
    assert "regression-cpu2-zero1-fp32 in deepspeed" in printed
    data = json.loads((tmp_path / "merged" / "report.json").read_text())
    assert data["ok"] is False and data["summary"]["failed"] == 1
    page = (tmp_path / "merged" / "report.html").read_text()
    assert page.index('id="failed"') < page.index('id="cross-environment"') < page.index('id="passed"')
    assert 'id="cell-deepspeed.regression-cpu2-zero1-fp32"' in page


def _save_golden_records(*directories: Path) -> Record:
    golden = load_golden("regression", "fp32")
    for directory in directories:
        golden.save(directory / "records" / SINGLE)
        golden.save(directory / "records" / "regression-cpu2-zero1-fp32")  # DeepSpeed: never compared
    return golden


def test_records_of_a_non_deepspeed_cell_are_compared_bit_for_bit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nods = write_env(tmp_path / "nods", "nodeepspeed", deepspeed=False)
    ds = write_env(tmp_path / "ds", "deepspeed", deepspeed=True)
    golden = _save_golden_records(nods, ds)
    out = tmp_path / "merged"
    assert merge(nods, ds, "--out", out) == 0
    assert "cross-environment: 1 bit-identical, 0 differ" in capsys.readouterr().out
    data = json.loads((out / "report.json").read_text())
    (check,) = data["cross_environment"]
    assert (check["id"], check["environments"], check["verdict"]) == (SINGLE, ["nodeepspeed", "deepspeed"],
                                                                      "bit-identical")
    assert data["ok"] is True
    assert "bit-identical" in (out / "report.html").read_text()

    # The same cell, one loss off by one ulp in the deepspeed environment: the merge fails.
    golden.losses[3] = float(torch.nextafter(torch.tensor(golden.losses[3], dtype=torch.float64),
                                             torch.tensor(1e9, dtype=torch.float64)))
    golden.save(ds / "records" / SINGLE)
    assert merge(nods, ds, "--out", out) == 1
    printed = capsys.readouterr().out
    assert "cross-environment: 0 bit-identical, 1 differ" in printed and "FAILED" in printed
    data = json.loads((out / "report.json").read_text())
    (check,) = data["cross_environment"]
    assert check["verdict"] == "differs" and check["first_difference"] == "losses" and data["ok"] is False
    assert check["max_abs_diff"] > 0
    page = (out / "report.html").read_text()
    assert "1 cross-environment comparison(s) differ" in page and ">differs<" in page
    junit = ET.parse(out / "junit.xml").getroot().findall("testsuite")[-1]
    assert junit.get("failures") == "1"
    assert "❌ differs" in (out / "report.md").read_text()


def test_a_corrupt_record_is_reported_as_differing(tmp_path: Path) -> None:
    nods = write_env(tmp_path / "nods", "nodeepspeed", deepspeed=False)
    ds = write_env(tmp_path / "ds", "deepspeed", deepspeed=True)
    _save_golden_records(nods, ds)
    tensors = ds / "records" / f"{SINGLE}.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:-8])
    assert merge(nods, ds, "--out", tmp_path / "merged") == 1
    (check,) = json.loads((tmp_path / "merged" / "report.json").read_text())["cross_environment"]
    assert check["verdict"] == "differs" and "cannot be read" in check["note"]


BAD_INPUTS = ["missing", "no_report", "unreadable", "not_a_report", "same_env", "out_is_input"]


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_inputs_exit_2_with_what_why_valid_and_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    good = write_env(tmp_path / "nods", "nodeepspeed", deepspeed=False)
    other = tmp_path / "other"
    out = tmp_path / "merged"
    expected = {
        "missing": "it does not exist",
        "no_report": "it holds no report.json",
        "unreadable": "its report.json cannot be read",
        "not_a_report": "is not a report of `python -m harness run`",
        "same_env": "both hold environment 'nodeepspeed'",
        "out_is_input": "it is one of the report dirs being merged",
    }[case]
    if case == "no_report":
        other.mkdir()
    elif case == "unreadable":
        other.mkdir()
        (other / "report.json").write_text('{"cells": [')
    elif case == "not_a_report":
        other.mkdir()
        (other / "report.json").write_text('{"environment": {"name": "x"}, "cells": [{"id": "?"}]}')
    elif case == "same_env":
        write_env(other, "nodeepspeed", deepspeed=False)
    elif case == "out_is_input":
        write_env(other, "deepspeed", deepspeed=True)
        out = other
    assert merge(good, other, "--out", out) == 2
    message = capsys.readouterr().err
    assert expected in message
    assert "Valid: " in message and "Fix: " in message
    assert not (tmp_path / "merged").exists(), "nothing is written for bad input"


def _sweep_env(directory: Path, name: str, deepspeed: str, supported: bool, fail: bool,
               gate_on: bool = True) -> Path:
    """A version-sweep environment's report dir, as `nox -s versions` leaves it."""
    from harness.versions.behaviours import BY_KEY, Observation, classify, write_behaviours
    from harness.versions.status import write_status

    write_env(directory, name, deepspeed=True, fail=fail)
    reason = "" if supported else f"refused by the core: deepspeed {deepspeed} is installed"
    write_status(directory, {"torch": "2.13.0+cpu", "deepspeed": deepspeed, "supported": supported,
                             "stage": "" if supported else "core", "reason": reason})
    scalar = BY_KEY["zero_dim_broadcast"]
    error = "RuntimeError: self.dim() cannot be 0 to view"
    seen = [Observation(scalar.key, 1, False, error, gate_on=gate_on)]
    write_behaviours(directory, {"deepspeed": deepspeed}, [classify(scalar, seen)])
    (directory / "sweep_times.json").write_text(json.dumps({"install": 1.0, "op build": 60.0, "cells": 30.0}))
    return directory


def test_a_version_sweep_merge_has_the_version_and_behaviour_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refused release's failing cells are its finding (measured with the override), not a
    regression of the merge; the supported one's pass; both tables are in report.json and .md."""
    new = _sweep_env(tmp_path / "new", "deepspeed_0_19", "0.19.8", supported=True, fail=False)
    old = _sweep_env(tmp_path / "old", "deepspeed_0_16", "0.16.9", supported=False, fail=True)
    out = tmp_path / "merged"
    assert merge(new, old, "--out", out) == 0, capsys.readouterr().out
    data = json.loads((out / "report.json").read_text())
    rows = {row["environment"]: row for row in data["versions"]}
    assert rows["deepspeed_0_19"]["status"] == "supported" and rows["deepspeed_0_19"]["failed"] == 0
    old_row = rows["deepspeed_0_16"]
    assert old_row["status"] == "not supported" and old_row["failed"] == 1
    assert "refused by the core" in old_row["reason"]
    assert "first failing cell regression-cpu2-zero1-fp32" in old_row["reason"]
    assert old_row["seconds"] == {"install": 1.0, "op build": 60.0, "cells": 30.0}
    assert data["behaviours"]["deepspeed_0_16"]["behaviours"][0]["verdict"] == "present"
    md = (out / "report.md").read_text()
    assert "### Versions" in md
    assert "| `deepspeed_0_16` | 2.13.0+cpu | 0.16.9 | not supported | 3 | 0 | 1 | 91 " in md
    assert "### DeepSpeed behaviours by version" in md and "present, patch on" in md


def test_a_core_patch_gate_that_disagrees_with_its_reproduction_fails_the_merge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = _sweep_env(tmp_path / "new", "deepspeed_0_19", "0.19.8", supported=True, fail=False, gate_on=False)
    assert merge(new, "--out", tmp_path / "merged") == 1
    assert "gate disagrees with DeepSpeed: deepspeed_0_19: zero_dim_broadcast" in capsys.readouterr().out
