"""Running `accelerate-core` as a real subprocess, isolated from the user's own config; or, where
the subprocess is not what a test is about, as `main(argv)` in the test's own process.

A subprocess of a command that imports torch (config, env) costs a few CPU-seconds of start-up
before it does anything; the test process has torch imported already. Every command keeps tests
that run it as a real subprocess, so the console entry point stays tested.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
CLI = [sys.executable, "-m", "accelerate_core.commands.main"]


def cli_environ(tmp_path: Path, extra: Mapping[str, str] | None = None,
                config_text: str | None = "version: 1\n") -> dict[str, str]:
    """os.environ without launcher variables and isolated from the user's own config.

    The config in use is tmp_path/launch_config.yaml (named by ACCELERATE_CORE_CONFIG_FILE)
    holding `config_text`; the default, a version-1 file that sets nothing, launches exactly as
    with no config file. `config_text=None` leaves the variable unset (the caller then moves
    XDG_CACHE_HOME itself; not for DeepSpeed runs: torch keeps JIT-built extensions there).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_CORE_")}
    if config_text is not None:
        tmp_path.mkdir(parents=True, exist_ok=True)
        config = tmp_path / "launch_config.yaml"
        config.write_text(config_text, encoding="utf-8")
        env["ACCELERATE_CORE_CONFIG_FILE"] = str(config)
    # The working tree first, whatever is installed; one thread per rank on small shared machines.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    if extra:
        env.update(extra)
    return env


def run_cli(args: Sequence[str], env: Mapping[str, str], stdin: str | None = None,
            timeout: float = 60.0, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=dict(env), input=stdin, capture_output=True, text=True,
                          timeout=timeout, cwd=str(cwd or REPO_ROOT), check=False)


def run_cli_in_process(args: Sequence[str], env: Mapping[str, str], stdin: str | None = None,
                       cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """What `run_cli` returns, from `accelerate_core.commands.main.main(args)` called here: with
    os.environ exactly `env`, `stdin` as standard input (none: an empty one), the working
    directory `cwd`, and both streams captured. All of it is put back afterwards."""
    from accelerate_core.commands.main import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(stdout), \
            contextlib.redirect_stderr(stderr):
        for name in set(os.environ) - set(env):
            patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        patch.setattr(sys, "stdin", io.StringIO(stdin or ""))
        patch.chdir(cwd or REPO_ROOT)
        try:
            status = main(list(args))
        except SystemExit as exc:  # argparse's --help and usage errors, as the process would exit
            status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return subprocess.CompletedProcess([*CLI, *args], status, stdout.getvalue(), stderr.getvalue())


def describe(result: subprocess.CompletedProcess[str]) -> str:
    """For assertion messages: the exit status and both streams."""
    return f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
