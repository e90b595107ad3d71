"""pytest hooks of the matrix items: xdist groups, one shared MatrixSession, reports at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.plan.selection import keyword_matches
from harness.run.runner import launch_group_key
from tests.matrix.session import MatrixSession, MatrixSettings, cell_of

_SESSION: MatrixSession | None = None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks to group items (--dist loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _deselect_unselected_cells(config, items)
    if not config.pluginmanager.hasplugin("xdist"):
        return  # without xdist the mark is unregistered, and strict markers would refuse it
    for item in items:
        cell = cell_of(item)
        if cell is not None:
            item.add_marker(pytest.mark.xdist_group(name=launch_group_key(cell)))


@pytest.fixture(scope="session")
def matrix_session(request: pytest.FixtureRequest) -> Iterator[MatrixSession]:
    """One per pytest process; `session.items` is the selection after -k / -m deselection."""
    global _SESSION
    _SESSION = MatrixSession(request.session.items, MatrixSettings.of(request.config))
    yield _SESSION


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Also after Ctrl-C: whatever finished is reported.
    if _SESSION is None:
        return
    target = _SESSION.write_reports()
    if target is not None and not hasattr(session.config, "workerinput"):
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("-", f"matrix report: {target / 'report.html'}")


def _deselect_unselected_cells(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--matrix-select: the matrix items whose cell the expression does not select are deselected
    (pytest counts them as it counts -k's), so no launch runs them."""
    expression = MatrixSettings.of(config).select
    if expression is None:
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        cell = cell_of(item)
        (dropped if cell is not None and not keyword_matches(cell, expression) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
