"""Tasks of a user's own package, named in matrix.toml by import path: loaded, registered under
their names, remembered for other processes, and refused clearly when the path leads nowhere.
No launch: the end-to-end run of such a package is tests/harness/cli/test_user_tasks.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from harness.errors import MatrixError
from harness.plan.matrix import load_matrix
from harness.starter import tolerances_text
from harness.tasks import get_task, import_tasks
from harness.tasks.registry import TaskImportError, import_paths_of, is_builtin
from tests.distributed_helpers import REPO_ROOT

TASK_MODULE = '''
from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks import Task, TaskOutput, register_task


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, inputs, labels=None):
        logits = self.linear(inputs)
        loss = None if labels is None else nn.functional.cross_entropy(logits.float(), labels)
        return TaskOutput(loss=loss, logits=logits)


@dataclass(frozen=True, kw_only=True)
class {cls}(Task):
    name: str = "{name}"
    lr: float = 0.1

    def _make_model(self):
        return Net()

    def _make_optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=self.lr)

    def _make_data(self, size, generator):
        inputs = torch.randn(size, 3, generator=generator)
        return {{"inputs": inputs, "labels": (inputs[:, 0] > 0).long()}}


@dataclass(frozen=True, kw_only=True)
class NeedsArguments(Task):
    width: int  # no default: not built by the harness on its own
'''

MATRIX_BODY = """
[axes]
task = {tasks}
device = ["cpu"]
strategy = ["single", "ddp"]
precision = ["fp32"]

[[shapes]]
device = "cpu"
processes = 1
strategies = ["single"]
"""


def write_matrix(directory: Path, body: str) -> Path:
    """A matrix file of its own: `body` and the harness's tolerance table."""
    path = directory / "matrix.toml"
    path.write_text(body + "\n" + tolerances_text(), encoding="utf-8")
    return path


def _package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str = "") -> tuple[str, str]:
    """A fresh package `pkg_<hex>` on sys.path with a `tasks` module (plus `extra` code, NAME
    standing for the task name); returns (package, task name)."""
    suffix = uuid.uuid4().hex[:8]
    package, name = f"pkg_{suffix}", f"user_{suffix}"
    root = tmp_path / "repo"
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "tasks.py").write_text(TASK_MODULE.format(cls="UserTask", name=name)
                                            + textwrap.dedent(extra).replace("NAME", name))
    monkeypatch.syspath_prepend(str(root))
    return package, name


def test_a_module_list_brings_its_tasks_into_the_matrix(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    package, name = _package(tmp_path, monkeypatch)
    body = f'tasks = ["{package}.tasks"]\n' + MATRIX_BODY.replace("task = {tasks}\n", "")
    matrix = load_matrix(write_matrix(tmp_path, body))
    assert [cell.id for cell in matrix.cells] == [f"{name}-cpu1-single-fp32"]
    assert matrix.task_imports == (f"{package}.tasks",)
    assert matrix.golden_dir == tmp_path / "golden"  # beside the matrix file
    task = get_task(name)
    assert not is_builtin(task) and is_builtin(get_task("regression"))
    assert import_paths_of([name, "regression"]) == [f"{package}.tasks"]  # built-ins need none


def test_an_import_path_in_the_task_axis_sits_beside_builtin_names(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    package, name = _package(tmp_path, monkeypatch)
    body = MATRIX_BODY.replace("{tasks}", f'["regression", "{package}.tasks:UserTask"]')
    matrix = load_matrix(write_matrix(tmp_path, body))
    assert [cell.task for cell in matrix.cells] == ["regression", name]
    assert matrix.task_imports == (f"{package}.tasks:UserTask",)
    assert import_tasks([f"{package}.tasks:UserTask"]) == [name]  # importing again is harmless


def test_the_repository_matrix_keeps_its_own_goldens() -> None:
    matrix = load_matrix()
    assert matrix.golden_dir is None and matrix.task_imports == ()


@pytest.mark.parametrize(("entry", "words"), [
    ("nosuchpkg_3f9.tasks:Task", ["no module named 'nosuchpkg_3f9'", "PYTHONPATH"]),
    ("{package}.tasks:Missing", ["has no 'Missing'", "UserTask"]),
    ("{package}.tasks:Net", ["not a Task subclass"]),
    ("{package}.tasks:NeedsArguments", ["cannot be built without arguments", "default"]),
])
def test_a_bad_import_path_says_what_is_wrong_and_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          entry: str, words: list[str]) -> None:
    package, _ = _package(tmp_path, monkeypatch)
    body = MATRIX_BODY.replace("{tasks}", f'["{entry.format(package=package)}"]')
    with pytest.raises(MatrixError) as raised:
        load_matrix(write_matrix(tmp_path, body))
    message = str(raised.value)
    assert "matrix.toml" in message and "Fix:" in message
    for word in words:
        assert word in message


def test_a_module_without_tasks_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package, _ = _package(tmp_path, monkeypatch)
    (tmp_path / "repo" / package / "empty.py").write_text("X = 1\n")
    with pytest.raises(TaskImportError, match="defines and registers no task"):
        import_tasks([f"{package}.empty"])


def test_a_module_that_registers_its_tasks_brings_exactly_those(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    package, name = _package(tmp_path, monkeypatch, extra="""
        register_task(UserTask(name="NAME_fast", lr=0.5))
        register_task(UserTask(name="NAME_slow", lr=0.01))
        """)
    assert import_tasks([f"{package}.tasks"]) == [f"{name}_fast", f"{name}_slow"]
    assert get_task(f"{name}_fast").lr == 0.5


@pytest.mark.parametrize(("extra", "raising", "last_line"), [
    ("raise RuntimeError('the settings file is missing')", "raise RuntimeError",
     "RuntimeError: the settings file is missing"),
    ("import nosuchdep_7c1", "import nosuchdep_7c1", "ModuleNotFoundError: No module named 'nosuchdep_7c1'"),
    ("def broken(:\n    pass", "def broken(:", "SyntaxError: "),
], ids=["raises", "missing-dependency", "syntax-error"])
def test_a_task_module_that_raises_on_import_is_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str, raising: str, last_line: str) -> None:
    """What was given, why it is wrong (the exception's last line, the file and line that raised),
    and the fix: not the import machinery's traceback."""
    package, _ = _package(tmp_path, monkeypatch, extra=extra)
    module = tmp_path / "repo" / package / "tasks.py"
    line = 1 + next(i for i, text in enumerate(module.read_text().splitlines()) if text.startswith(raising))
    body = f'tasks = ["{package}.tasks"]\n' + MATRIX_BODY.replace("task = {tasks}\n", "")
    with pytest.raises(MatrixError) as raised:
        load_matrix(write_matrix(tmp_path, body))
    message = str(raised.value)
    assert message.startswith(f"matrix.toml: task import path '{package}.tasks': importing module "
                              f"'{package}.tasks' raised {last_line}")
    assert f"({module}, line {line})" in message
    fix = f'Fix: correct the error there; `python -c "import {package}.tasks"` shows the whole traceback'
    assert fix in message
    with pytest.raises(TaskImportError) as direct:  # the rank side imports the same way: same error
        import_tasks([f"{package}.tasks:UserTask"])
    assert type(direct.value.__cause__).__name__ == last_line.split(":")[0]  # the traceback kept


def test_the_cli_reports_a_task_module_that_raises_with_the_usage_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package, _ = _package(tmp_path, monkeypatch, extra="VALUE = 1 / 0")
    body = f'tasks = ["{package}.tasks"]\n' + MATRIX_BODY.replace("task = {tasks}\n", "")
    matrix = write_matrix(tmp_path, body)
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "repo"), str(REPO_ROOT)])}
    for command in (["list"], ["run", "--report-dir", str(tmp_path / "report")]):
        done = subprocess.run([sys.executable, "-m", "harness", *command, "--matrix", str(matrix)],
                              cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300,
                              check=False)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert f"importing module '{package}.tasks' raised ZeroDivisionError: division by zero" in done.stderr
