"""Settings every test process shares, applied before any test module imports torch's kernels.

One intra-op thread per process, as the harness's own launches (harness/run/torchrun_launch.py) and the
golden generation run. torch's default, a thread per core, oversubscribes the machine as soon as
pytest-xdist's workers and the ranks they launch run side by side: on 2 cores the spinning
OpenMP threads of one process steal the cores the others need, and the nodeepspeed selection
took 209 s with the default against 133 s with one thread (same machine, one run each).
A value the user set (OMP_NUM_THREADS in the environment) is kept; subprocesses inherit it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # after the variable: a torch started here reads it

_threads = os.environ["OMP_NUM_THREADS"]
if _threads.isdigit() and int(_threads) > 0:  # anything else: torch's own handling of the variable
    torch.set_num_threads(int(_threads))


def pytest_addoption(parser: pytest.Parser) -> None:
    """The matrix items' options (--matrix-env, ...; tests/matrix/options.py): here, because pytest
    reads options only from the conftest files it loads at startup. Imported here, not above: it
    imports accelerate_core, so torch, which must start after OMP_NUM_THREADS is set."""
    from tests.matrix.options import add_options

    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    """A bad --matrix-timeout (or MATRIX_TIMEOUT) is a usage error before anything is collected."""
    from tests.matrix.options import MatrixSettings

    MatrixSettings.of(config)


# Each test file's measured seconds (benchmarks/suite_time.py --write-costs, from a CI run's
# junit files); a file not in it yet is estimated from its items.
_COSTS_FILE = Path(__file__).with_name("file_costs.json")


def _estimated_seconds(items: list[pytest.Item]) -> float:
    """About 10 s per item that starts processes (marked slow, or a matrix cell), 0.1 s otherwise."""
    return sum(10.0 if item.get_closest_marker("slow") or item.get_closest_marker("matrix") else 0.1
               for item in items)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The costliest files first, each file's items kept together and in order.

    Under `-n 2 --dist loadfile` (noxfile.py) a worker takes whole files in collection order as it
    frees up. In path order the heaviest files (tests/matrix, tests/test_examples.py) came last,
    and one worker finished them while the other sat idle: longest first is the classic remedy.
    Every worker sorts the same collection the same way, as xdist requires; the order of files
    changes nothing else (each test sets up what it uses)."""
    measured: dict[str, float] = {}
    if _COSTS_FILE.is_file():
        measured = json.loads(_COSTS_FILE.read_text(encoding="utf-8"))
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def cost(path: str) -> float:
        return measured.get(path, _estimated_seconds(by_file[path]))

    order = sorted(by_file, key=lambda path: -cost(path))  # stable: ties keep path order
    items[:] = [item for path in order for item in by_file[path]]
