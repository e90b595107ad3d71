"""nox sessions: `nox -s matrix` (the whole matrix, both environments), `tests`, `golden`, `lint`.

Every session gets its own virtualenv under .nox/. torch==2.13.0 is installed FIRST: the
project's own range (torch>=2.3) would otherwise let pip fetch the newest build, a download of
several GB. Reuse venvs with `nox -R` (= --reuse-existing-virtualenvs --no-install).

Each venv has its own TORCH_EXTENSIONS_DIR: DeepSpeed JIT-compiles a comm op on first use
(about 60 s) into that cache, and a cache shared between venvs with different torch paths is
rebuilt and overwritten every time the other venv runs.

    nox -s matrix                    both environments; exit 1 if either has an unexpected result
    nox -s matrix -- -k mlp          arguments after -- go to `python -m harness run`
    nox -s tests                     the test suite with and without deepspeed
    nox -s golden                    check goldens reproduce; `nox -s golden -- --update` rewrites
    nox -s lint                      ruff + mypy
"""

from __future__ import annotations

from pathlib import Path

import nox

PYTHON = "3.11"
TORCH = "torch==2.13.0"
# Environments of matrix/matrix.toml that run on a CPU; nodeepspeed first: the deepspeed run
# compares its non-DeepSpeed records with the nodeepspeed ones (cross-environment check).
ENVIRONMENTS = ["nodeepspeed", "deepspeed"]
EXTRAS = {"nodeepspeed": "test", "deepspeed": "deepspeed,test"}
REPORTS = Path("reports")

nox.options.sessions = ["lint", "tests", "matrix"]
nox.options.error_on_missing_interpreters = True


def _install(session: nox.Session, extras: str) -> None:
    session.install(TORCH)  # first, pinned: see the module docstring
    session.install("-e", f".[{extras}]")


def _environ(session: nox.Session, env_name: str) -> dict[str, str]:
    venv = Path(session.virtualenv.location)
    return {
        "TORCH_EXTENSIONS_DIR": str(venv / "torch_extensions"),
        "MATRIX_ENV": env_name,  # read by tests/matrix (the matrix as pytest items)
    }


def _check_deepspeed(session: nox.Session, env_name: str) -> None:
    """Fail early when the venv does not match its environment (e.g. a reused, altered venv)."""
    wanted = env_name == "deepspeed"
    session.run(
        "python",
        "-c",
        "import importlib.util, sys; found = importlib.util.find_spec('deepspeed') is not None; "
        f"wanted = {wanted}; "
        "sys.exit(0 if found == wanted else "
        f"'environment {env_name}: deepspeed installed=' + str(found) + ', expected ' + str(wanted) + "
        "'. Fix: remove the venv under .nox/ and run again without -R')",
        silent=True,
    )


def _build_deepspeed_ops(session: nox.Session, env_name: str) -> None:
    """JIT-compile DeepSpeed's CPU comm op once, before anything runs in parallel.

    Otherwise the first DeepSpeed launches compile it (about 60 s of g++ on every core) while
    other launches run: on a 2-core machine that starved gloo's rendezvous and TCP store threads
    of concurrent launches (ranks aborted with "terminate called without an active exception",
    seen in CI), which says nothing about the code under test."""
    if env_name != "deepspeed":
        return
    session.run(
        "python",
        "-c",
        "from deepspeed.accelerator import get_accelerator; "
        "builder = get_accelerator().create_op_builder('ShareMemCommBuilder'); "
        "builder is not None and builder.load()",
        env=_environ(session, env_name),
    )


@nox.session(python=PYTHON)
@nox.parametrize("env", ENVIRONMENTS, ids=ENVIRONMENTS)
def matrix(session: nox.Session, env: str) -> None:
    """The whole matrix in one environment; the report goes to reports/<env>/."""
    _install(session, EXTRAS[env])
    _check_deepspeed(session, env)
    _build_deepspeed_ops(session, env)
    command = ["python", "-m", "harness", "run", "--env-name", env, "--report-dir", str(REPORTS / env)]
    other = REPORTS / "nodeepspeed"
    if env == "deepspeed" and (other / "report.json").is_file():
        command += ["--compare-records", str(other)]
    elif env == "deepspeed":
        session.warn(f"no {other}/report.json: the cross-environment check is skipped this time")
    session.run(*command, *session.posargs, env=_environ(session, env))


@nox.session(python=PYTHON)
@nox.parametrize("env", ENVIRONMENTS, ids=ENVIRONMENTS)
def tests(session: nox.Session, env: str) -> None:
    """The test suite (the matrix items included); arguments after -- replace the defaults."""
    _install(session, EXTRAS[env])
    _check_deepspeed(session, env)
    _build_deepspeed_ops(session, env)
    # --dist loadgroup keeps a launch group's matrix items on one worker (one shared launch).
    args = session.posargs or ["tests", "-n", "2", "--dist", "loadgroup", "-ra"]
    session.run("python", "-m", "pytest", *args, env=_environ(session, env))


@nox.session(python=PYTHON)
def golden(session: nox.Session) -> None:
    """Goldens come from plain torch (harness.reference): no deepspeed needed."""
    _install(session, "test")
    session.run("python", "-m", "harness", "golden", *(session.posargs or ["--check"]))


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    _install(session, "test,dev")
    session.run("ruff", "check", ".")
    session.run("mypy")
