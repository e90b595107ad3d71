"""The matrix items themselves: selection by marker, and one launch per group of selected cells."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.spec.cell import Cell
from harness.spec.matrix import load_matrix
from harness.truth.outcome import CellResult, Status
from tests.matrix import session as session_module
from tests.matrix.session import REPO_ROOT, MatrixSession


@pytest.fixture
def matrix_copy(tmp_path: Path) -> Path:
    """The real matrix.toml with two registered tasks, so the test holds however the task list changes."""
    text = (REPO_ROOT / "matrix" / "matrix.toml").read_text()
    # The task array may span lines: replace it whole, up to its closing bracket.
    text, replaced = re.subn(r"(?ms)^task = \[.*?\]", 'task = ["regression", "classifier"]', text, count=1)
    assert replaced == 1, "matrix.toml has no `task = [...]` axis to narrow"
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    return path


def _collect(matrix_file: Path, *args: str) -> list[str]:
    env = {**os.environ, "MATRIX_FILE": str(matrix_file)}
    command = [sys.executable, "-m", "pytest", "tests/matrix/test_matrix.py", "--collect-only", "-q"]
    command += ["-p", "no:cacheprovider", *args]
    out = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return [line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines() if "::test_cell[" in line]


def test_marker_selection_collects_exactly_the_matching_cells(matrix_copy: Path) -> None:
    cells = load_matrix(matrix_copy).cells
    assert _collect(matrix_copy) == [c.id for c in cells]
    assert _collect(matrix_copy, "-m", "deepspeed") == [c.id for c in cells if c.is_deepspeed]
    assert _collect(matrix_copy, "-m", "bf16 and not gpu and not multi_gpu") == [
        c.id for c in cells if c.precision == "bf16" and c.device == "cpu"
    ]
    assert _collect(matrix_copy, "-k", "regression-cpu2") == [
        c.id for c in cells if c.task == "regression" and c.device == "cpu" and c.processes == 2
    ]


class _Item:
    """Just what MatrixSession reads from a pytest item: its parametrized cell."""

    def __init__(self, cell: Cell) -> None:
        self.callspec = type("CallSpec", (), {"params": {"cell": cell}})()


def recording_run_cells(calls: list[list[str]]) -> Any:
    """Stands in for the launches only (the real ones run as the matrix items themselves): records
    which cells each call was given and passes them, so these tests see how items are grouped."""

    def run_cells(cells: list[Cell], options: Any, progress: Any = None) -> list[CellResult]:
        calls.append([c.id for c in cells])
        return [
            CellResult(c, Status.PASSED)
            for c in cells
        ]

    return run_cells


def test_one_run_per_launch_group_of_the_selected_cells(
    monkeypatch: pytest.MonkeyPatch, matrix_copy: Path, tmp_path: Path
) -> None:
    monkeypatch.setenv("MATRIX_FILE", str(matrix_copy))
    monkeypatch.setenv("MATRIX_REPORT_DIR", str(tmp_path / "reports"))
    selected = [Cell.from_id(i) for i in ("regression-cpu2-ddp-fp32", "regression-cpu1-single-fp32",
                                          "classifier-cpu2-zero3-bf16")]  # fmt: skip
    calls: list[list[str]] = []
    monkeypatch.setattr(session_module, "run_cells", recording_run_cells(calls))
    session = MatrixSession([_Item(c) for c in selected])  # type: ignore[misc]
    for cell in selected:
        assert session.result_for(cell).id == cell.id
    assert calls == [
        ["regression-cpu2-ddp-fp32", "classifier-cpu2-zero3-bf16"],
        ["regression-cpu1-single-fp32"],
    ]
    target = session.write_reports()
    assert target == tmp_path / "reports" and (target / "report.json").is_file()


def test_workers_share_one_run_per_group(
    monkeypatch: pytest.MonkeyPatch, matrix_copy: Path, tmp_path: Path
) -> None:
    """Two xdist workers (two sessions of one test run) launch a group once; both see its results."""
    monkeypatch.setenv("MATRIX_FILE", str(matrix_copy))
    monkeypatch.setenv("MATRIX_REPORT_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "run1")
    selected = [Cell.from_id(i) for i in ("regression-cpu2-ddp-fp32", "regression-cpu2-zero1-fp32")]
    calls: list[list[str]] = []
    monkeypatch.setattr(session_module, "run_cells", recording_run_cells(calls))
    workers = []
    for name in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", name)
        worker = MatrixSession([_Item(c) for c in selected])  # type: ignore[misc]
        worker.result_for(selected[0] if name == "gw0" else selected[1])
        workers.append(worker)
    assert calls == [[c.id for c in selected]]
    assert all(set(w.results) == {c.id for c in selected} for w in workers)
    for name, worker in zip(("gw0", "gw1"), workers, strict=True):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", name)
        worker.write_reports()
    report = json.loads((tmp_path / "reports" / "report.json").read_text())
    assert [c["id"] for c in report["cells"]] == [c.id for c in selected]
