"""pytest hooks of the matrix items: xdist groups, one shared MatrixSession, reports at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.run.runner import launch_group_key
from tests.matrix.session import MatrixSession, MatrixSettings, cell_of

_SESSION: MatrixSession | None = None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks to group items (--dist loadgroup)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
