"""Running `accelerate-core` as a real subprocess, isolated from the user's own config."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

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


def describe(result: subprocess.CompletedProcess[str]) -> str:
    """For assertion messages: the exit status and both streams."""
    return f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
