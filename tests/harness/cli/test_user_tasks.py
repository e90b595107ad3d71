"""A user's own task package, outside the repository, through the matrix as a user drives it:
`init` into a tmp dir, goldens made beside its matrix, a run that passes, then a deliberate
change to the user's model that the run must catch, and a change to the task that makes the
golden stale with the exact command for that golden. Every command runs from another folder, so
nothing relies on the current directory.

Both runs are `python -m harness` child processes with the user's package importable only
through PYTHONPATH (their launches' ranks import it the same way): that is what proves it. The
other commands run in this process (run_harness_in_process of tests/harness/runner_helpers.py,
from that other folder, output and exit code captured): `init` imports nothing of the package;
the golden commands import it through sys.path and hand PYTHONPATH to the child that makes
goldens, and afterwards the package's modules and tasks are forgotten again, so each command
imports the user's files as they are then.

On the way, `calibrate --write-semantics-tolerances` measures the own-semantics check's tolerances
for the user's half-precision cells, and the passing run shows its bf16 DDP cell checked by them.

Launches: a passing run of two launch shapes, and one failing cell run with --isolate: its launch
is the whole judgement; the runner's confirming rerun of a failure in a fresh launch (a third
launch, which this test never looked at) is asserted in tests/harness/run/test_runner.py.
Goldens for every precision, in one child process. One flow, not several tests: `init`, the goldens
and a run cost seconds each, and each step starts from the last one's state."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from harness.calibrate.semantics_judge import semantics_entry
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.tasks import registry
from tests.harness.runner_helpers import REPO_ROOT, cells_by_id, run_harness_in_process

pytestmark = pytest.mark.slow


def _elsewhere(user: Path) -> Path:
    """A folder beside the user's repository, where every command runs."""
    elsewhere = user.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return elsewhere


def _pythonpath(user: Path) -> str:
    """The user's repository first: the only way its package is importable."""
    paths = (str(user), str(REPO_ROOT), os.environ.get("PYTHONPATH"))
    return os.pathsep.join(p for p in paths if p)


def _harness(*args: str, user: Path, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CI": "1", "PYTHONPATH": _pythonpath(user)}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=_elsewhere(user), env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _registry_tables() -> dict[str, dict[Any, Any]]:
    """Copies of the task registry's tables (tasks by name, what each import path brought)."""
    return {name: dict(value) for name, value in vars(registry).items()
            if isinstance(value, dict) and not name.startswith("__")}


@contextmanager
def _users_package_for_a_while(user: Path) -> Iterator[None]:
    """The user's package importable in this process meanwhile (first on sys.path, as PYTHONPATH
    puts it in a child); afterwards the package's modules and the tasks it registered are gone
    again (checked), so other tests, and the next command, never see them."""
    tables, names, modules, path = _registry_tables(), registry.task_names(), set(sys.modules), list(sys.path)
    sys.path.insert(0, str(user))
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(user)):
                del sys.modules[name]
        for name, table in tables.items():
            getattr(registry, name).clear()
            getattr(registry, name).update(table)
    assert registry.task_names() == names, "the user's tasks stayed registered in this process"


def _harness_here(*args: str, user: Path) -> subprocess.CompletedProcess[str]:
    """`python -m harness ARGS` in this process, from the other folder, the user's package
    importable here and (PYTHONPATH) in the children it starts; what a child would have given."""
    with _users_package_for_a_while(user):
        return run_harness_in_process(*args, cwd=_elsewhere(user), env={"PYTHONPATH": _pythonpath(user)},
                                      timeout=300)


def _out(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def test_a_users_task_package_makes_goldens_passes_and_catches_a_changed_model(tmp_path: Path) -> None:
    user = tmp_path / "user_repo"
    matrix = str(user / "matrix.toml")
    init = _harness_here("init", str(user), user=user)
    assert init.returncode == 0, _out(init)
    assert (user / "my_tasks" / "tasks.py").is_file() and "golden --update" in init.stdout
    # never overwrites silently
    again = _harness_here("init", str(user), user=user)
    assert again.returncode == 2 and "--force" in again.stderr, _out(again)

    made = _harness_here("golden", "--update", "--matrix", matrix, user=user)
    assert made.returncode == 0, _out(made)
    assert all(f"my_mlp-{p}: new" in made.stdout for p in ("fp32", "fp16", "bf16")), _out(made)
    assert f"rewritten in {user / 'golden'}" in made.stdout
    made_files = sorted(p.name for p in (user / "golden").iterdir())
    assert made_files == sorted(f"my_mlp-{p}.{ext}" for p in ("fp32", "fp16", "bf16")
                                for ext in ("json", "safetensors"))
    assert not (REPO_ROOT / "matrix" / "golden" / "my_mlp-fp32.json").exists()
    shown = _harness_here("golden", "--show", "my_mlp", "--precision", "fp32", "--matrix", matrix, user=user)
    assert shown.returncode == 0, _out(shown)
    assert all(word in shown.stdout for word in ("16 micro-steps", "hidden.weight", "eval outputs"))

    _measure_and_name_the_semantics_tolerances(user, matrix)

    report = tmp_path / "pass"
    passing = _harness("run", "--matrix", matrix, "-k", "fp32 and (cpu1 or ddp) or my_mlp-cpu2-ddp-bf16",
                       "--report-dir", str(report), user=user)
    assert passing.returncode == 0, _out(passing)
    cells = cells_by_id(report)
    passed = ("my_mlp-cpu1-single-fp32", "my_mlp-cpu2-ddp-fp32", "my_mlp-cpu2-ddp-bf16")
    assert {cells[i]["status"] for i in passed} == {"passed"}, {i: cells[i]["reason"] for i in passed}
    # The bf16 cell of the user's task is checked against its own-semantics reference.
    checked = cells["my_mlp-cpu2-ddp-bf16"]
    assert checked["extra"]["semantics"].startswith("final weights within atol"), checked["extra"]
    assert any(c["quantity"].startswith("semantics:state_dict/") for c in checked["comparisons"])

    # A deliberate change to the user's model (its own module, not the task's): the numbers move.
    models = user / "my_tasks" / "models.py"
    models.write_text(models.read_text().replace("nn.functional.gelu(", "nn.functional.relu("))
    report = tmp_path / "fail"
    failing = _harness("run", "--matrix", matrix, "-k", "cpu1 and fp32", "--isolate", "--report-dir",
                       str(report), user=user)
    assert failing.returncode == 1, _out(failing)
    cell = cells_by_id(report)["my_mlp-cpu1-single-fp32"]
    assert cell["status"] == "failed" and "loss leaves tolerance at step 0" in cell["reason"], cell["reason"]

    # A change to the task's definition: its goldens are stale, and the fix names this golden only.
    tasks = user / "my_tasks" / "tasks.py"
    tasks.write_text(tasks.read_text().replace("seed: int = 11", "seed: int = 12"))
    stale = _harness_here("golden", "--check", "--task", "my_mlp", "--precision", "fp32", "--matrix", matrix,
                          user=user)
    assert stale.returncode == 1, _out(stale)
    assert stale.stdout.count("my_mlp-fp32: changed") == 1 and "my_mlp-bf16" not in stale.stdout
    fix = f"python -m harness golden --update --task my_mlp --precision fp32 --matrix {matrix}"
    assert fix in stale.stdout


def _measure_and_name_the_semantics_tolerances(user: Path, matrix: str) -> None:
    """`calibrate --write-semantics-tolerances` on the user's matrix: its child process (kernels
    capped at AVX2) imports the user's package too, the file lands beside the matrix, and once the
    matrix names it (not before) a bf16 cell of the user's task has a tolerance for the check."""
    measured = _harness("calibrate", "--matrix", matrix, "--write-semantics-tolerances", user=user)
    assert measured.returncode == 0, _out(measured)
    written = user / "semantics_tolerances.toml"
    assert written.is_file() and "[bf16.my_mlp.splits_2]" in written.read_text()
    add = 'semantics_per_task = "semantics_tolerances.toml"'
    assert add in measured.stdout, _out(measured)
    # Before the matrix names the file, the check has no tolerance for the cell: what a run's
    # judging asks, here in this process.
    cell = Cell.from_id("my_mlp-cpu2-ddp-bf16")
    with _users_package_for_a_while(user):
        entry, why = semantics_entry(cell, load_matrix(matrix).tolerances)
    assert entry is None and why.startswith("no measured tolerance for bf16 my_mlp"), why
    toml = user / "matrix.toml"
    toml.write_text(toml.read_text().replace("[tolerances]\n", f"[tolerances]\n{add}\n", 1))
    with _users_package_for_a_while(user):
        entry, why = semantics_entry(cell, load_matrix(matrix).tolerances)
    assert entry is not None, why
