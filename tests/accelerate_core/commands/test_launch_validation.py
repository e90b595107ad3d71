"""Bad input to `accelerate-core launch`: one clear message (given, why, valid, fix), exit 2, no
traceback, nothing started. And flags override the config file (checked with --dry-run)."""

from __future__ import annotations

from pathlib import Path
from subprocess import CompletedProcess

import pytest

from tests.accelerate_core.commands.cli_helpers import SCRIPTS, cli_environ, describe, run_cli
from tests.deepspeed_absent import environ_without_deepspeed
from tests.run_if import run_if

# Its outcome depends on whether deepspeed is installed: tests(nodeepspeed) runs it too.
pytestmark = pytest.mark.nodeepspeed

SCRIPT = str(SCRIPTS / "show_env.py")


def assert_clear_error(result: CompletedProcess[str], *expected: str) -> None:
    assert result.returncode == 2, describe(result)
    err = result.stderr
    assert err.startswith("accelerate-core launch: error: "), describe(result)
    assert "Traceback" not in err and "Valid:" in err and "Fix:" in err, err
    for text in expected:
        assert text in err, err


def dry_run(tmp_path: Path, flags: list[str], config_text: str = "version: 1\n") -> dict[str, str]:
    result = run_cli(["launch", "--dry-run", *flags, SCRIPT], cli_environ(tmp_path, config_text=config_text))
    assert result.returncode == 0, describe(result)
    lines = result.stdout.splitlines()
    env = dict(line[len("env: "):].split("=", 1) for line in lines if line.startswith("env: "))
    env["command"] = next(line for line in lines if line.startswith("command: "))
    return env


def test_missing_script(tmp_path: Path) -> None:
    result = run_cli(["launch", str(tmp_path / "no_such_script.py")], cli_environ(tmp_path))
    assert_clear_error(result, "no_such_script.py", "no such file")


@pytest.mark.parametrize(("flags", "expected"), [
    (["--backend", "gpu"], ["--backend='gpu'", "'single', 'ddp', 'deepspeed'"]),
    (["--mixed-precision", "fp8"], ["--mixed-precision='fp8'", "'no', 'fp16', 'bf16'"]),
    (["--mixed-precision", "none"], ["--mixed-precision='none'", "'none' is ambiguous"]),
    (["--num-processes", "two"], ["--num-processes='two'", "a whole number >= 1"]),
    (["--num_processes", "0"], ["--num-processes=0", "out of range"]),
    (["--backend", "deepspeed", "--zero-stage", "4"], ["--zero-stage=4", "0, 1, 2, 3"]),
    (["--backend", "single", "--num-processes", "2"], ["single-device backend runs one process"]),
    (["--backend", "ddp", "--zero-stage", "2"], ["zero_stage is a DeepSpeed setting"]),
    (["--num-processes", "4", "--num-machines", "2"], ["main_process_ip"]),
])
def test_unknown_or_contradictory_flag_values(tmp_path: Path, flags: list[str], expected: list[str]) -> None:
    assert_clear_error(run_cli(["launch", *flags, SCRIPT], cli_environ(tmp_path)), *expected)


def test_config_file_with_unknown_keys(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("version: 1\nbackend: ddp\nnum_procs: 2\n")
    result = run_cli(["launch", "--config-file", str(config), SCRIPT], cli_environ(tmp_path))
    assert_clear_error(result, str(config), "unknown key(s) 'num_procs' (did you mean 'num_processes'?)")


def test_config_file_named_but_missing(tmp_path: Path) -> None:
    result = run_cli(["launch", "--config-file", str(tmp_path / "nope.yaml"), SCRIPT], cli_environ(tmp_path))
    assert_clear_error(result, "nope.yaml", "no such file")


def test_deepspeed_requested_without_deepspeed_installed(tmp_path: Path) -> None:
    env = environ_without_deepspeed(tmp_path / "hide", cli_environ(tmp_path))
    result = run_cli(["launch", "--cpu", "--num-processes", "2", "--backend", "deepspeed", SCRIPT], env)
    assert_clear_error(result, "--backend deepspeed was requested", "'deepspeed' package is not installed",
                       "pip install deepspeed")
    # The same through a config file; and the other backends still launch without it.
    config = tmp_path / "ds.yaml"
    config.write_text("version: 1\nbackend: deepspeed\nzero_stage: 2\n")
    from_config = run_cli(["launch", "--config-file", str(config), SCRIPT], env)
    assert_clear_error(from_config, "pip install deepspeed")
    fine = run_cli(["launch", "--dry-run", "--cpu", "--num-processes", "2", "--backend", "ddp", SCRIPT], env)
    assert fine.returncode == 0, describe(fine)


# The file asks for DeepSpeed, and launch validates that before it starts anything.
@pytest.mark.deepspeed
@run_if(deepspeed=True)
def test_flags_override_the_config_file_and_underscores_are_accepted(tmp_path: Path) -> None:
    config = ("version: 1\nbackend: deepspeed\ncpu: true\nnum_processes: 4\nmixed_precision: bf16\n"
              "zero_stage: 3\noffload_param_device: cpu\ngradient_accumulation_steps: 2\n")
    from_file = dry_run(tmp_path / "a", [], config)
    assert from_file["ACCELERATE_CORE_BACKEND"] == "deepspeed"
    assert from_file["ACCELERATE_CORE_ZERO_STAGE"] == "3"
    assert "--nproc-per-node 4" in from_file["command"]
    assert from_file["DS_ACCELERATOR"] == "cpu"
    over = dry_run(tmp_path / "b", ["--zero_stage", "1", "--offload-param-device", "none",
                                    "--num-processes", "2", "--mixed-precision", "no"], config)
    assert (over["ACCELERATE_CORE_ZERO_STAGE"], over["ACCELERATE_CORE_MIXED_PRECISION"]) == ("1", "no")
    assert over["ACCELERATE_CORE_OFFLOAD_PARAM_DEVICE"] == "none"
    assert over["ACCELERATE_CORE_GRADIENT_ACCUMULATION_STEPS"] == "2"  # from the file, not overridden
    assert "--nproc-per-node 2" in over["command"]
    # Switching to DDP by flag drops the file's DeepSpeed-only settings instead of failing on them.
    ddp = dry_run(tmp_path / "c", ["--backend", "ddp", "--no-cpu"], config)
    assert ddp["ACCELERATE_CORE_BACKEND"] == "ddp" and ddp["ACCELERATE_CORE_CPU"] == "0"
    assert "ACCELERATE_CORE_ZERO_STAGE" not in ddp and "DS_ACCELERATOR" not in ddp


def test_without_config_several_processes_mean_ddp_and_only_flags_are_passed(tmp_path: Path) -> None:
    # No backend set: launch checks the run as DDP (what the connector resolves for 2 processes)
    # but passes nothing, so a script's DeepSpeedPlugin could still choose DeepSpeed.
    env = dry_run(tmp_path, ["--num-processes", "2"])
    passed = {k: v for k, v in env.items() if k.startswith("ACCELERATE_CORE_")}
    assert passed == {}
    assert dry_run(tmp_path / "b", ["--num-processes", "2", "--mixed-precision", "fp16"]).get(
        "ACCELERATE_CORE_MIXED_PRECISION") == "fp16"
    assert "torchrun_entry" in env["command"] and "--rdzv-endpoint 127.0.0.1:0" in env["command"]


def test_multi_node_flags_reach_the_rendezvous(tmp_path: Path) -> None:
    env = dry_run(tmp_path, ["--num-processes", "8", "--num-machines", "2", "--machine-rank", "1",
                             "--main-process-ip", "10.1.2.3", "--main-process-port", "29555"])
    for part in ("--nnodes 2", "--node-rank 1", "--nproc-per-node 4", "--rdzv-backend static",
                 "--master-addr 10.1.2.3", "--master-port 29555"):
        assert part in env["command"], env["command"]
