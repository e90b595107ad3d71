"""A third implementation is one more module: a toy adapter (the core under another name, a few
lines) registered from a user's module runs its cells through the same runner, launches, judge
and goldens as the core's, with ids ending in its name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.judge.outcome import Status
from harness.plan.cell import Cell
from harness.run.runner import RunOptions, run_cells
from harness.tasks import import_tasks

pytestmark = pytest.mark.slow  # one real launch

TOY = '''
from dataclasses import dataclass

from harness.implementations import Implementation, register
from harness.implementations.core import CoreAdapter
from harness.tasks.regression import RegressionTask


class ToyAdapter(CoreAdapter):
    name = "toy"


register(Implementation("toy", "accelerate_core", "it ships with this test", "toy_impl:ToyAdapter"))


@dataclass(frozen=True)
class ToyRegression(RegressionTask):  # brings the module to every rank (the plan's task imports)
    name: str = "toy_regression"
    golden_of: str = "regression"
'''


def test_a_toy_third_implementation_runs_through_the_same_runner(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "toy_impl.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{Path.cwd()}")
    import_tasks(["toy_impl"])
    cell = Cell("toy_regression", "cpu", 1, "single", "fp32", implementation="toy")
    assert cell.id == "toy_regression-cpu1-single-fp32-toy"
    [result] = run_cells([cell], RunOptions(tmp_path / "report", timeout_s=90))
    assert result.status == Status.PASSED, result.reason
    assert any(p.name.startswith("cpu1-toy") for p in (tmp_path / "report" / "launches").iterdir())
    sys.modules.pop("toy_impl", None)
