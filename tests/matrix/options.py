"""The settings of the matrix items (tests/matrix): pytest options, an environment variable each as
the fallback. An option given on the command line wins over its variable; a variable wins over
the default. Both reach pytest-xdist's workers unchanged (workers get the controller's options).

  --matrix-env NAME         MATRIX_ENV         the matrix.toml environment this run is in
                                               (default: deepspeed if it is installed, else
                                               nodeepspeed)
  --matrix-report-dir DIR   MATRIX_REPORT_DIR  where reports go (default: reports/pytest/<env>)
  --matrix-timeout SECONDS  MATRIX_TIMEOUT     per-cell timeout (default 120)
  --matrix-file PATH        MATRIX_FILE        another matrix file (default matrix/matrix.toml)
  --matrix-implementation NAMES  MATRIX_IMPLEMENTATION  whose cells become items: comma-separated
                                               implementations, or "all" (default: core, as
                                               `python -m harness run`; docs/implementations.md)
  --matrix-exact            MATRIX_EXACT       judge the exact tier too, as `harness run --exact`
                                               (the variable: 1/true/yes or 0/false/no; default off)
  --matrix-select EXPR      MATRIX_SELECT      only the cells this `-k` expression of `harness run`
                                               selects become items to run; the others are
                                               deselected, as pytest's -k deselects (default: all)

Registered by tests/conftest.py (pytest reads options only from plugins and the conftest files it
loads at startup, and `pytest tests` does not load tests/matrix/conftest.py that early). Kept free
of the harness's imports: every test process loads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from accelerate_core.imports import is_deepspeed_available

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TIMEOUT_S = 120.0

# option destination -> (command-line flag, environment variable)
OPTIONS = {
    "matrix_env": ("--matrix-env", "MATRIX_ENV"),
    "matrix_report_dir": ("--matrix-report-dir", "MATRIX_REPORT_DIR"),
    "matrix_timeout": ("--matrix-timeout", "MATRIX_TIMEOUT"),
    "matrix_file": ("--matrix-file", "MATRIX_FILE"),
    "matrix_implementation": ("--matrix-implementation", "MATRIX_IMPLEMENTATION"),
    "matrix_exact": ("--matrix-exact", "MATRIX_EXACT"),
    "matrix_select": ("--matrix-select", "MATRIX_SELECT"),
}
_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no")


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("matrix", "the compatibility matrix as pytest items (tests/matrix)")
    group.addoption("--matrix-env", dest="matrix_env", metavar="NAME", default=None,
                    help="the matrix.toml environment this run is in (env MATRIX_ENV; default: deepspeed "
                         "if it is installed, else nodeepspeed)")
    group.addoption("--matrix-report-dir", dest="matrix_report_dir", metavar="DIR", default=None,
                    help="where the matrix items' reports go (env MATRIX_REPORT_DIR; default: "
                         "reports/pytest/<env>)")
    group.addoption("--matrix-timeout", dest="matrix_timeout", metavar="SECONDS", default=None,
                    help=f"per-cell timeout in seconds (env MATRIX_TIMEOUT; default {DEFAULT_TIMEOUT_S:g})")
    group.addoption("--matrix-file", dest="matrix_file", metavar="PATH", default=None,
                    help="another matrix file (env MATRIX_FILE; default matrix/matrix.toml)")
    group.addoption("--matrix-implementation", dest="matrix_implementation", metavar="NAMES", default=None,
                    help="whose cells become items: comma-separated implementations or 'all' (env "
                         "MATRIX_IMPLEMENTATION; default: core)")
    group.addoption("--matrix-exact", dest="matrix_exact", action="store_const", const="1", default=None,
                    help="judge the exact tier too, as `python -m harness run --exact` (env MATRIX_EXACT=1)")
    group.addoption("--matrix-select", dest="matrix_select", metavar="EXPR", default=None,
                    help="only the cells this `python -m harness run -k` expression selects run; the other "
                         "matrix items are deselected (env MATRIX_SELECT; default: every cell)")


def _given(config: pytest.Config | None, dest: str) -> str | None:
    """The option's value if given, else its environment variable's, else None."""
    value = config.getoption(dest, default=None) if config is not None else None
    if value is None or value == "":
        value = os.environ.get(OPTIONS[dest][1]) or None
    return value


def _timeout(config: pytest.Config | None) -> float:
    given = _given(config, "matrix_timeout")
    if given is None:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        flag, variable = OPTIONS["matrix_timeout"]
        raise pytest.UsageError(f"{flag} / {variable}: {given!r} is not a number of seconds. "
                                f"Valid: a positive number, e.g. {DEFAULT_TIMEOUT_S:g}. Fix: {flag} 300")
    return seconds


def _exact(config: pytest.Config | None) -> bool:
    given = _given(config, "matrix_exact")
    if given is None or given.lower() in _FALSE:
        return False
    if given.lower() in _TRUE:
        return True
    flag, variable = OPTIONS["matrix_exact"]
    raise pytest.UsageError(f"{variable}: {given!r} is not a yes or no. Valid: {', '.join(_TRUE + _FALSE)}. "
                            f"Fix: {variable}=1, or the flag {flag}")


def _select(config: pytest.Config | None) -> str | None:
    """The --matrix-select expression, parsed now: a bad one is a usage error before collection."""
    given = _given(config, "matrix_select")
    if given is None:
        return None
    from harness.errors import SelectionError  # here, not at the top: every test process loads this file
    from harness.plan.cell import Cell
    from harness.plan.selection import keyword_matches

    try:
        keyword_matches(Cell.from_id("regression-cpu1-single-fp32"), given)
    except SelectionError as exc:
        flag, variable = OPTIONS["matrix_select"]
        raise pytest.UsageError(f"{flag} / {variable}: {exc}") from None
    return given


@dataclass(frozen=True)
class MatrixSettings:
    env: str
    report_dir: Path
    timeout_s: float
    file: Path | None  # None: matrix/matrix.toml
    implementations: frozenset[str] = frozenset({"core"})  # {"all"}: every implementation's cells
    exact: bool = False  # judge the exact tier too (harness run --exact)
    select: str | None = None  # a `harness run -k` expression over cell ids; None: every cell

    @classmethod
    def of(cls, config: pytest.Config | None = None) -> MatrixSettings:
        """This run's settings: `config`'s options, else the environment, else the defaults."""
        env = _given(config, "matrix_env") or ("deepspeed" if is_deepspeed_available() else "nodeepspeed")
        report_dir = _given(config, "matrix_report_dir")
        file = _given(config, "matrix_file")
        implementations = _given(config, "matrix_implementation") or "core"
        return cls(env=env,
                   report_dir=Path(report_dir) if report_dir else REPO_ROOT / "reports" / "pytest" / env,
                   timeout_s=_timeout(config),
                   file=Path(file) if file else None,
                   implementations=frozenset(n.strip() for n in implementations.split(",") if n.strip()),
                   exact=_exact(config),
                   select=_select(config))
