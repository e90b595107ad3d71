"""`accelerate-core config`: the questionnaire through standard input, and --default.

The first test pipes its answers into a real `accelerate-core config` process (the console entry
point, as a user runs it); the other questionnaires and --default call the command's main(argv)
in this process (cli_helpers.run_cli_in_process: same environment, standard input and streams),
where each subprocess would pay torch's start-up for the same code path. --default's file is then
read by real `launch --dry-run` processes.
"""

from __future__ import annotations

from pathlib import Path
from subprocess import CompletedProcess

import pytest

from accelerate_core.launch import config_file
from accelerate_core.launch.config import CONFIG_VERSION, LaunchConfig, default_config_path, load_config
from tests.accelerate_core.commands.cli_helpers import cli_environ, describe, run_cli, run_cli_in_process


def run_config(tmp_path: Path, answers: list[str], *flags: str,
               subprocess: bool = False) -> tuple[CompletedProcess[str], Path]:
    """The questionnaire answered with `answers` (one per line), in this process unless
    `subprocess`."""
    path = tmp_path / "out" / "config.yaml"
    run = run_cli if subprocess else run_cli_in_process
    result = run(["config", "--config-file", str(path), *flags], cli_environ(tmp_path),
                 stdin="".join(a + "\n" for a in answers))
    return result, path


def test_deepspeed_answers_write_the_expected_file(tmp_path: Path) -> None:
    # cpu, backend, machines, processes, precision, stage, offload optimizer, offload params,
    # accumulation, clipping. An invalid answer ("4" as ZeRO stage) is asked again.
    # A real `accelerate-core config` process, its answers through a pipe.
    answers = ["yes", "deepspeed", "1", "2", "bf16", "4", "3", "cpu", "none", "4", "1.5"]
    result, path = run_config(tmp_path, answers, subprocess=True)
    assert result.returncode == 0, describe(result)
    assert "Not accepted" in result.stdout and "0, 1, 2, 3" in result.stdout
    assert load_config(path) == LaunchConfig(
        backend="deepspeed", cpu=True, num_processes=2, mixed_precision="bf16", zero_stage=3,
        offload_optimizer_device="cpu", offload_param_device="none", gradient_accumulation_steps=4,
        gradient_clipping=1.5)
    data = config_file.load(path)
    assert data["version"] == CONFIG_VERSION and next(iter(data)) == "version"


def test_deepspeed_empty_answers_leave_the_plugin_settings_to_the_script(tmp_path: Path) -> None:
    # cpu, backend, then empty answers: machines 1, processes 2, and "script decides" for
    # precision, ZeRO stage, optimizer offload, fp16 emulation, accumulation and clipping.
    result, path = run_config(tmp_path, ["yes", "deepspeed", *[""] * 8])
    assert result.returncode == 0, describe(result)
    assert "DeepSpeedPlugin(...) values" in result.stdout and "Offload parameters" not in result.stdout
    assert result.stdout.count("[script decides]") == 6
    config = load_config(path)
    assert config == LaunchConfig(backend="deepspeed", cpu=True, num_processes=2)
    assert (config.zero_stage, config.offload_optimizer_device, config.cpu_fp16_emulation) == (None,) * 3
    # Only what was chosen reaches the processes; a script's DeepSpeedPlugin decides the rest.
    assert config.to_launch_settings().to_environ() == {
        "ACCELERATE_CORE_BACKEND": "deepspeed", "ACCELERATE_CORE_CPU": "1"}


def test_single_backend_asks_no_process_or_zero_questions(tmp_path: Path) -> None:
    result, path = run_config(tmp_path, ["yes", "single", "", "", ""])  # defaults after the backend
    assert result.returncode == 0, describe(result)
    assert "How many" not in result.stdout and "ZeRO stage" not in result.stdout
    config = load_config(path)
    assert config == LaunchConfig(backend="single", cpu=True)
    # Empty answers to precision and accumulation leave them to the script: null in the file.
    assert "Mixed precision (no/fp16/bf16; 'no' is fp32, empty: the script decides)? [script decides]" \
        in result.stdout
    assert (config.mixed_precision, config.gradient_accumulation_steps) == (None, None)
    data = config_file.load(path)
    assert data["mixed_precision"] is None and data["gradient_accumulation_steps"] is None
    assert "null means unset" in path.read_text()


def test_none_is_refused_as_a_precision_answer(tmp_path: Path) -> None:
    # "none" could mean fp32 ("no") or unset: asked again, then "no" is fp32, a chosen value.
    result, path = run_config(tmp_path, ["yes", "single", "none", "no", "1", ""])
    assert result.returncode == 0, describe(result)
    assert "'none' is ambiguous" in result.stdout
    assert load_config(path) == LaunchConfig(backend="single", cpu=True, mixed_precision="no",
                                             gradient_accumulation_steps=1)


def test_several_machines_ask_for_rank_address_and_port(tmp_path: Path) -> None:
    answers = ["no", "ddp", "2", "1", "10.0.0.5", "", "3", "8", "fp16", "1", "none"]
    result, path = run_config(tmp_path, answers)
    assert result.returncode == 0, describe(result)
    assert "multiple of the 2 machines" in result.stdout  # 3 processes over 2 machines re-asked
    assert load_config(path) == LaunchConfig(
        backend="ddp", cpu=False, num_processes=8, num_machines=2, machine_rank=1,
        main_process_ip="10.0.0.5", main_process_port=29500, mixed_precision="fp16",
        gradient_accumulation_steps=1)  # an answered 1 is a choice, kept (not unset)


def test_end_of_input_is_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    result, path = run_config(tmp_path, ["yes", "ddp"])
    assert result.returncode == 2, describe(result)
    assert "standard input" in result.stderr and "ended before" in result.stderr
    assert "Traceback" not in result.stderr and not path.exists()


def test_invalid_answers_are_retried_then_refused(tmp_path: Path) -> None:
    result, path = run_config(tmp_path, ["maybe", "perhaps", "sometimes"])
    assert result.returncode == 2, describe(result)
    assert result.stdout.count("Not accepted") == 3 and "3 answers in a row" in result.stderr
    assert not path.exists()


def test_default_writes_a_cpu_config_on_a_cpu_only_machine(tmp_path: Path) -> None:
    import torch

    env = cli_environ(tmp_path, config_text=None, extra={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    result = run_cli_in_process(["config", "--default"], env, stdin="")
    assert result.returncode == 0, describe(result)
    path = tmp_path / "cache" / "accelerate_core" / "default_config.yaml"
    assert str(path) in result.stdout
    config = load_config(path)
    if not torch.cuda.is_available():
        assert config == LaunchConfig(cpu=True, num_processes=1)
        assert config.cpu is True  # a working CPU config, not "unset"
    else:
        assert config.cpu is None and config.num_processes == torch.cuda.device_count()
    # What only a script (or the process count) should decide is unset (null), so
    # Accelerator(fp16=True) runs and `launch --num-processes 2` needs no other flag.
    text = path.read_text()
    for key in ("backend", "mixed_precision", "gradient_accumulation_steps"):
        assert f"{key}: null" in text, text
    assert "null means unset" in text
    # The file written to the default place is the one a real launch process then reads, and
    # launch passes only the values that are set.
    shown = run_cli(["launch", "--dry-run", __file__], env)
    assert shown.returncode == 0, describe(shown)
    passed = sorted(line for line in shown.stdout.splitlines() if line.startswith("env: ACCELERATE_CORE_"))
    assert passed == (["env: ACCELERATE_CORE_CPU=1"] if config.cpu else []), shown.stdout
    chosen = run_cli(["launch", "--dry-run", "--mixed-precision", "bf16", __file__], env)
    assert chosen.returncode == 0, describe(chosen)
    assert "env: ACCELERATE_CORE_MIXED_PRECISION=bf16" in chosen.stdout


def test_default_path_is_the_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCELERATE_CORE_CONFIG_FILE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_config_path() == tmp_path / "accelerate_core" / "default_config.yaml"
