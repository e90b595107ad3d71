"""`accelerate-core env`: versions, devices and the config in use; deepspeed never imported.

Real `accelerate-core env` processes where the process itself matters: deepspeed hidden from it,
oneDNN capped through its environment (read when the process starts), and the help texts.
The uncapped reports call the command's main(argv) in this process (cli_helpers.run_cli_in_process:
same environment and streams), where a subprocess would pay torch's start-up for the same code.
"""

from __future__ import annotations

import importlib.metadata
import platform
import re
from pathlib import Path

import pytest
import torch

from accelerate_core.imports import is_deepspeed_available
from tests.accelerate_core.commands.cli_helpers import cli_environ, describe, run_cli, run_cli_in_process
from tests.deepspeed_absent import environ_without_deepspeed

# Its outcome depends on whether deepspeed is installed: tests(nodeepspeed) runs it too.
pytestmark = pytest.mark.nodeepspeed


def row(out: str, name: str) -> str:
    """The value of one `- name : value` line."""
    match = re.search(rf"^- {re.escape(name)} +: (.*)$", out, re.M)
    assert match, f"no row {name!r} in:\n{out}"
    return match.group(1)


def test_env_reports_versions_devices_and_the_config(tmp_path: Path) -> None:
    env = cli_environ(tmp_path, config_text="version: 1\nbackend: ddp\nnum_processes: 2\n")
    result = run_cli_in_process(["env"], env)
    assert result.returncode == 0, describe(result)
    out = result.stdout
    assert row(out, "Python").startswith(platform.python_version() + " ")
    assert row(out, "torch") == torch.__version__
    assert row(out, "accelerate-core") == importlib.metadata.version("accelerate-core")
    ds = importlib.metadata.version("deepspeed") if is_deepspeed_available() else "not installed"
    assert row(out, "deepspeed") == ds
    devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert row(out, "CUDA devices").split(":")[0] == str(devices)
    assert str(tmp_path / "launch_config.yaml") in out and "backend" in out and "ddp" in out


def test_env_says_not_installed_when_deepspeed_is_absent_and_reports_a_bad_config(tmp_path: Path) -> None:
    env = environ_without_deepspeed(tmp_path / "hide", cli_environ(tmp_path, config_text="backend: x\n"))
    result = run_cli(["env"], env)
    assert result.returncode == 0, describe(result)
    assert row(result.stdout, "deepspeed") == "not installed"
    assert "Config problem" in result.stdout and "no 'version' key" in result.stdout


def test_help_texts_name_every_command_and_flag() -> None:
    env = cli_environ(Path("/nonexistent"), config_text=None)
    top = run_cli(["--help"], env)
    assert top.returncode == 0 and all(c in top.stdout for c in ("config", "launch", "env"))
    launch = run_cli(["launch", "--help"], env).stdout
    for flag in ("--config-file", "--num-processes", "--num_processes", "--backend", "--zero-stage",
                 "--mixed-precision", "--cpu", "--num-machines", "--machine-rank", "--main-process-ip",
                 "--main-process-port", "single,ddp,deepspeed", "no,fp16,bf16"):
        assert flag in launch, flag
    assert "--default" in run_cli(["config", "--help"], env).stdout
    assert run_cli(["env", "--help"], env).returncode == 0
    bare = run_cli([], env)
    assert bare.returncode == 2 and "launch" in bare.stderr


@pytest.mark.numerics
def test_env_names_what_decides_numerics_here(tmp_path: Path) -> None:
    # Checked against what torch and the OS say in this process, not against a fixed machine;
    # a capped oneDNN (as on a CPU without it) must read "no native fp16" and "refused".
    from accelerate_core.machine import NUMERIC_ENVIRONMENT, cpu_model_and_flags

    for cap, native in (({}, bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())),
                        ({"DNNL_MAX_CPU_ISA": "AVX2"}, False)):
        env = {**cli_environ(tmp_path), **cap}
        # The cap only acts on a process started with it; this process is not capped already
        # unless the whole run is (the older-CPU pass), and then main(argv) here reads the same.
        run = run_cli if cap else run_cli_in_process
        result = run(["env"], env)
        assert result.returncode == 0, describe(result)
        out = result.stdout
        model, flags = cpu_model_and_flags()
        assert row(out, "CPU").startswith(model)
        if flags is not None:
            assert row(out, "CPU flags").startswith(f"avx2 {'yes' if 'avx2' in flags else 'no'}, ")
        assert row(out, "Native fp16 / bf16 (oneDNN)").startswith("yes" if native else "no")
        assert row(out, "DeepSpeed on this CPU").startswith("fp16 native" if native else "fp16 refused")
        assert row(out, "BLAS / oneDNN") and row(out, "Threads").startswith("intra-op ")
        numerics = ", ".join(f"{k}={env[k]}" for k in NUMERIC_ENVIRONMENT if k in env) or "none set"
        assert row(out, "Numerics environment") == numerics
        assert "DNNL_MAX_CPU_ISA=AVX2" in numerics or not cap  # (may be set already: the older-CPU pass)
