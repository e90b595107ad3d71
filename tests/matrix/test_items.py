"""The matrix items themselves: selection by marker, and one launch per group of selected cells.

pytest's own collection of tests/matrix/test_matrix.py runs in this process (`pytest.main`, as
pytester's in-process runs do): a fresh import of that module and its conftest for each
collection, so they read the copied matrix, and the modules this process had are put back after.
A `python -m pytest` subprocess per selection cost a torch import each and proved nothing more.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from accelerate_core.imports import is_deepspeed_available
from harness.judge.outcome import CellResult, Status
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from tests.harness.runner_helpers import write_matrix_file
from tests.matrix import session as session_module
from tests.matrix.session import REPO_ROOT, MatrixSession, MatrixSettings


@pytest.fixture
def matrix_copy(tmp_path: Path) -> Path:
    """The real matrix.toml with two registered tasks, so the test holds however the task list changes."""
    text = (REPO_ROOT / "matrix" / "matrix.toml").read_text()
    # The task array may span lines: replace it whole, up to its closing bracket.
    text, replaced = re.subn(r"(?ms)^task = \[.*?\]", 'task = ["regression", "classifier"]', text, count=1)
    assert replaced == 1, "matrix.toml has no `task = [...]` axis to narrow"
    return write_matrix_file(tmp_path / "matrix.toml", text)


# Modules a collection of the matrix items imports and that keep state (conftest's session; test
# matrix's parameters come from each run's settings): imported afresh for each collection.
_FRESH_MODULES = ("tests.matrix.test_matrix", "tests.matrix.conftest")


@contextmanager
def _fresh_imports(names: tuple[str, ...]) -> Iterator[None]:
    """`names` absent from sys.modules inside, this process's own modules back afterwards."""
    saved: dict[str, ModuleType] = {n: sys.modules.pop(n) for n in names if n in sys.modules}
    try:
        yield
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


class _Selected:
    """A pytest plugin: the node ids of the items left after -m / -k deselection, and the matrix
    settings that run resolved."""

    def __init__(self) -> None:
        self.node_ids: list[str] = []
        self.settings: MatrixSettings | None = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.node_ids = [item.nodeid for item in session.items]
        self.settings = MatrixSettings.of(session.config)


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], environ: dict[str, str],
         *args: str, expect: pytest.ExitCode = pytest.ExitCode.OK) -> tuple[_Selected, str]:
    """pytest on tests/matrix/test_matrix.py with `args`, these MATRIX_* variables set (and the
    others unset), in this process: the plugin that saw the selection, and the output."""
    selected = _Selected()
    with monkeypatch.context() as patch, _fresh_imports(_FRESH_MODULES):
        for variable in ("MATRIX_ENV", "MATRIX_REPORT_DIR", "MATRIX_TIMEOUT", "MATRIX_FILE", "MATRIX_EXACT",
                         "MATRIX_SELECT"):
            patch.delenv(variable, raising=False)
        for variable, value in environ.items():
            patch.setenv(variable, value)
        patch.chdir(REPO_ROOT)
        exit_code = pytest.main(["tests/matrix/test_matrix.py", "-q", "-p", "no:cacheprovider", *args],
                                plugins=[selected])
    output = capsys.readouterr()
    text = f"{output.out[-4000:]}\n{output.err[-4000:]}"
    assert exit_code == expect, f"exit {exit_code!r}\n{text}"
    return selected, text


def _collect(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], matrix_file: Path,
             *args: str) -> list[str]:
    """The cell ids pytest collects from tests/matrix/test_matrix.py with `args`, `matrix_file` as
    the matrix through MATRIX_FILE (its real collection and deselection, in this process)."""
    selected, _ = _run(monkeypatch, capsys, {"MATRIX_FILE": str(matrix_file)}, "--collect-only", *args)
    return _cell_ids(selected)


def _cell_ids(selected: _Selected) -> list[str]:
    return [node.split("[", 1)[1].rstrip("]") for node in selected.node_ids if "::test_cell[" in node]


def test_marker_selection_collects_exactly_the_matching_cells(
    matrix_copy: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cells = [c for c in load_matrix(matrix_copy).cells if c.implementation == "core"]  # the default
    assert _collect(monkeypatch, capsys, matrix_copy) == [c.id for c in cells]
    assert _collect(monkeypatch, capsys, matrix_copy, "-m", "deepspeed") == [
        c.id for c in cells if c.is_deepspeed
    ]
    assert _collect(monkeypatch, capsys, matrix_copy, "-m", "bf16 and not gpu and not multi_gpu") == [
        c.id for c in cells if c.precision == "bf16" and c.device == "cpu"
    ]
    assert _collect(monkeypatch, capsys, matrix_copy, "-k", "regression-cpu2") == [
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


def test_the_options_win_over_the_environment_variables(
    matrix_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """MATRIX_FILE names a one-task matrix, --matrix-file the two-task one: the option's cells are
    collected, and every other option beats its variable too."""
    one_task = tmp_path / "one" / "matrix.toml"
    one_task.parent.mkdir()
    narrowed = re.sub(r'(?m)^task = .*$', 'task = ["regression"]', matrix_copy.read_text(), count=1)
    write_matrix_file(one_task, narrowed)
    environ = {"MATRIX_FILE": str(one_task), "MATRIX_ENV": "deepspeed", "MATRIX_TIMEOUT": "5",
               "MATRIX_REPORT_DIR": str(tmp_path / "from-env")}
    by_env, _ = _run(monkeypatch, capsys, environ, "--collect-only")
    assert _cell_ids(by_env) == [c.id for c in load_matrix(one_task).cells if c.implementation == "core"]
    assert by_env.settings == MatrixSettings(env="deepspeed", report_dir=tmp_path / "from-env", timeout_s=5.0,
                                             file=one_task)
    by_option, _ = _run(monkeypatch, capsys, environ, "--collect-only", "--matrix-file", str(matrix_copy),
                        "--matrix-env", "nodeepspeed", "--matrix-timeout", "7.5",
                        "--matrix-report-dir", str(tmp_path / "from-option"))
    core = [c.id for c in load_matrix(matrix_copy).cells if c.implementation == "core"]  # the default
    assert _cell_ids(by_option) == core
    assert by_option.settings == MatrixSettings(env="nodeepspeed", report_dir=tmp_path / "from-option",
                                                timeout_s=7.5, file=matrix_copy)


def test_neither_given_the_defaults_hold(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    selected, _ = _run(monkeypatch, capsys, {}, "--collect-only")
    env = "deepspeed" if is_deepspeed_available() else "nodeepspeed"
    assert selected.settings == MatrixSettings(env=env, report_dir=REPO_ROOT / "reports" / "pytest" / env,
                                               timeout_s=120.0, file=None)
    assert _cell_ids(selected) == [c.id for c in load_matrix().cells if c.implementation == "core"]


@pytest.mark.parametrize("given", [("--matrix-timeout", "soon"), ("MATRIX_TIMEOUT", "-3")])
def test_a_timeout_that_is_not_a_positive_number_is_a_usage_error(
    given: tuple[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name, value = given
    args = [name, value] if name.startswith("--") else []
    environ = {} if args else {name: value}
    _, output = _run(monkeypatch, capsys, environ, "--collect-only", *args,
                     expect=pytest.ExitCode.USAGE_ERROR)
    assert f"--matrix-timeout / MATRIX_TIMEOUT: {value!r} is not a number of seconds" in output
    assert "Fix: --matrix-timeout 300" in output


@pytest.mark.parametrize(("environ", "args", "exact"), [
    ({}, (), False), ({"MATRIX_EXACT": "1"}, (), True), ({"MATRIX_EXACT": "no"}, (), False),
    ({"MATRIX_EXACT": "0"}, ("--matrix-exact",), True),  # the flag beats the variable
])
def test_the_exact_tier_is_off_unless_asked_for(
    environ: dict[str, str], args: tuple[str, ...], exact: bool, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    selected, _ = _run(monkeypatch, capsys, environ, "--collect-only", *args)
    assert selected.settings is not None and selected.settings.exact is exact


def test_an_exact_variable_that_is_not_a_yes_or_no_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, output = _run(monkeypatch, capsys, {"MATRIX_EXACT": "maybe"}, "--collect-only",
                     expect=pytest.ExitCode.USAGE_ERROR)
    assert "MATRIX_EXACT: 'maybe' is not a yes or no" in output and "Fix: MATRIX_EXACT=1" in output


def test_matrix_select_deselects_the_cells_it_does_not_name_and_leaves_the_rest_as_they_were(
    matrix_copy: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    every = _collect(monkeypatch, capsys, matrix_copy)  # regression and classifier cells
    classifier = [i for i in every if i.split("-")[0] == "classifier"]
    assert classifier and len(classifier) < len(every)
    assert _collect(monkeypatch, capsys, matrix_copy, "--matrix-select", "classifier") == classifier
    environ = {"MATRIX_FILE": str(matrix_copy), "MATRIX_SELECT": "classifier and not fp16"}
    selected, output = _run(monkeypatch, capsys, environ, "--collect-only")
    assert _cell_ids(selected) == [i for i in classifier if "-fp16" not in i]
    assert f"{len(every) - len(_cell_ids(selected))} deselected" in output, output
    # with pytest's own -m, both apply
    both = _collect(monkeypatch, capsys, matrix_copy, "--matrix-select", "classifier or cpu1", "-m", "bf16")
    assert both == [i for i in every if ("classifier" in i or "-cpu1-" in i) and i.endswith("-bf16")]
    assert any(i.startswith("regression-") for i in both)


def test_a_matrix_select_that_does_not_parse_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, output = _run(monkeypatch, capsys, {}, "--collect-only", "--matrix-select", "shuffle and (",
                     expect=pytest.ExitCode.USAGE_ERROR)
    assert "--matrix-select / MATRIX_SELECT: -k 'shuffle and (': it does not parse" in output, output


@pytest.mark.slow
def test_a_real_cell_runs_in_the_environment_and_reports_where_the_options_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One real cell, launched by the items: the report goes to --matrix-report-dir, not to
    MATRIX_REPORT_DIR, and names the --matrix-env environment."""
    environ = {"MATRIX_REPORT_DIR": str(tmp_path / "from-env"), "MATRIX_ENV": "deepspeed"}
    selected, output = _run(monkeypatch, capsys, environ, "-k", "regression-cpu1-single-fp32", "--matrix-env",
                            "nodeepspeed", "--matrix-report-dir", str(tmp_path / "from-option"))
    assert _cell_ids(selected) == ["regression-cpu1-single-fp32"]
    assert "1 passed" in output
    report = json.loads((tmp_path / "from-option" / "report.json").read_text())
    assert [c["id"] for c in report["cells"]] == ["regression-cpu1-single-fp32"]
    assert report["environment"]["name"] == "nodeepspeed"
    assert not (tmp_path / "from-env").exists()
