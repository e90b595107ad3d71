"""A user's own task package, outside the repository, through the matrix as a user drives it:
`init` into a tmp dir, goldens made beside its matrix, a run that passes, then a deliberate
change to the user's model that the run must catch, and a change to the task that makes the
golden stale with the exact command for that golden. The package is importable only through
PYTHONPATH and every command runs from another folder, so nothing relies on the current
directory. Launches: a passing run of two launch shapes, and one failing cell (which the runner
confirms in a fresh launch); goldens for fp32 only, in one child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.runner_helpers import REPO_ROOT, cells_by_id

pytestmark = pytest.mark.slow


def _harness(*args: str, user: Path, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    paths = (str(user), str(REPO_ROOT), os.environ.get("PYTHONPATH"))
    env = {**os.environ, "CI": "1", "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    elsewhere = user.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _out(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def test_a_users_task_package_makes_goldens_passes_and_catches_a_changed_model(tmp_path: Path) -> None:
    user = tmp_path / "user_repo"
    matrix = str(user / "matrix.toml")
    init = _harness("init", str(user), user=user)
    assert init.returncode == 0, _out(init)
    assert (user / "my_tasks" / "tasks.py").is_file() and "golden --update" in init.stdout
    again = _harness("init", str(user), user=user)  # never overwrites silently
    assert again.returncode == 2 and "--force" in again.stderr, _out(again)

    made = _harness("golden", "--update", "--precision", "fp32", "--matrix", matrix, user=user)
    assert made.returncode == 0, _out(made)
    assert "my_mlp-fp32: new" in made.stdout and f"rewritten in {user / 'golden'}" in made.stdout
    made_files = sorted(p.name for p in (user / "golden").iterdir())
    assert made_files == ["my_mlp-fp32.json", "my_mlp-fp32.safetensors"]
    assert not (REPO_ROOT / "matrix" / "golden" / "my_mlp-fp32.json").exists()
    shown = _harness("golden", "--show", "my_mlp", "--precision", "fp32", "--matrix", matrix, user=user)
    assert shown.returncode == 0, _out(shown)
    assert all(word in shown.stdout for word in ("16 micro-steps", "hidden.weight", "eval outputs"))

    report = tmp_path / "pass"
    passing = _harness("run", "--matrix", matrix, "-k", "fp32 and (cpu1 or ddp)", "--report-dir", str(report),
                       user=user)
    assert passing.returncode == 0, _out(passing)
    cells = cells_by_id(report)
    assert {cells[i]["status"] for i in ("my_mlp-cpu1-single-fp32", "my_mlp-cpu2-ddp-fp32")} == {"passed"}

    # A deliberate change to the user's model (its own module, not the task's): the numbers move.
    models = user / "my_tasks" / "models.py"
    models.write_text(models.read_text().replace("nn.functional.gelu(", "nn.functional.relu("))
    report = tmp_path / "fail"
    failing = _harness("run", "--matrix", matrix, "-k", "cpu1 and fp32", "--report-dir", str(report),
                       user=user)
    assert failing.returncode == 1, _out(failing)
    cell = cells_by_id(report)["my_mlp-cpu1-single-fp32"]
    assert cell["status"] == "failed" and "loss leaves tolerance at step 0" in cell["reason"], cell["reason"]

    # A change to the task's definition: its goldens are stale, and the fix names this golden only.
    tasks = user / "my_tasks" / "tasks.py"
    tasks.write_text(tasks.read_text().replace("seed: int = 11", "seed: int = 12"))
    stale = _harness("golden", "--check", "--task", "my_mlp", "--precision", "fp32", "--matrix", matrix,
                     user=user)
    assert stale.returncode == 1, _out(stale)
    assert stale.stdout.count("my_mlp-fp32: changed") == 1 and "my_mlp-bf16" not in stale.stdout
    fix = f"python -m harness golden --update --task my_mlp --precision fp32 --matrix {matrix}"
    assert fix in stale.stdout
