"""Every cell of matrix/matrix.toml as a pytest item, run through the real runner.

Select as usual: `pytest tests/matrix -m deepspeed`, `-m "bf16 and not ddp"`, `-k mlp-cpu2`.
In parallel: `pytest tests/matrix -n 2 --dist loadgroup` (a launch group stays on one worker).
Canary cells (opt-in, they break on purpose) are not items; run them with `python -m harness run
-k canary`.
"""

from __future__ import annotations

import pytest

from harness.judge.outcome import Status
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.report.text import failure_text
from tests.matrix.session import MatrixSession, MatrixSettings

# Reads the goldens: run again against goldens made elsewhere (nox -s foreign_goldens); the cells
# of the environment without deepspeed are its own (tests(nodeepspeed) runs them).
pytestmark = [pytest.mark.goldens, pytest.mark.nodeepspeed]


def _params(settings: MatrixSettings) -> list[object]:
    return [
        pytest.param(cell, id=cell.id, marks=[getattr(pytest.mark, name) for name in cell.markers])
        for cell in load_matrix(settings.file).cells
        if "all" in settings.implementations or cell.implementation in settings.implementations
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One item per cell of the run's matrix (--matrix-file, else MATRIX_FILE, else the default)."""
    if "cell" in metafunc.fixturenames:
        metafunc.parametrize("cell", _params(MatrixSettings.of(metafunc.config)))


def test_cell(cell: Cell, matrix_session: MatrixSession) -> None:
    result = matrix_session.result_for(cell)
    status = Status(result.status)
    if status is Status.PASSED:
        assert not [c for c in result.comparisons if not c.ok], failure_text(result)
        return
    if status is Status.SKIPPED:
        pytest.skip(result.reason)
    if status is Status.XFAILED:
        pytest.xfail(result.reason)
    if status is Status.XPASSED:
        message = f"[XPASS(strict)] declared an expected failure, yet passed: {result.reason}"
        pytest.fail(message, pytrace=False)
    pytest.fail(failure_text(result), pytrace=False)
