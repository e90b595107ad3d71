"""A conflict between the script and the launch names where the launch value came from, and the
fix there: the config file (edit that key in that file), a launch flag (drop or change it), or
an environment variable set by hand (unset it). And on several processes the error ends the
output, once, below torchrun's summary instead of above its 25-line block.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from accelerate_core import DeepSpeedPlugin
from accelerate_core.commands.rank_errors import ErrorWatch, RankError, report
from accelerate_core.connector import (
    build_deepspeed_plugin,
    resolve_backend,
    resolve_cpu,
    resolve_mixed_precision,
)
from accelerate_core.errors import ConflictingSettingsError
from accelerate_core.launch.settings import SOURCES_VARIABLE, LaunchSettings, SettingSource
from tests.accelerate_core.commands.cli_helpers import CLI, REPO_ROOT, cli_environ, describe, run_cli

SCRIPT = REPO_ROOT / "tests" / "accelerate_core" / "scripts" / "conflicting_precision.py"
ERROR = "accelerate_core.errors.ConflictingSettingsError: "


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The conflict message the script's rank printed (the last line of its traceback)."""
    assert result.returncode == 1, describe(result)
    lines = [line for line in result.stderr.splitlines() if line.startswith(ERROR)]
    assert len(lines) == 1, describe(result)
    assert "unreachable" not in result.stdout
    return lines[0][len(ERROR):]


# -- the three sources, end to end (one process: the script runs directly) --------------------

def test_a_value_from_the_config_file_names_the_file_and_the_key_to_edit(tmp_path: Path) -> None:
    env = cli_environ(tmp_path, config_text="version: 1\ncpu: true\nmixed_precision: bf16\n")
    config = env["ACCELERATE_CORE_CONFIG_FILE"]
    message = refusal(run_cli(["launch", str(SCRIPT)], env, timeout=120))
    assert message.startswith(
        f"Accelerator(mixed_precision='fp16'): the launcher was told mixed_precision='bf16' by the "
        f"config file {config} (`mixed_precision: bf16`). "), message
    assert (f"Fix: in {config}, change `mixed_precision: bf16` to `mixed_precision: fp16` or to "
            "`mixed_precision: null` (the script decides)") in message, message
    assert "ACCELERATE_CORE_" not in message and "--mixed-precision" not in message, message


def test_a_value_from_a_launch_flag_names_the_flag_to_drop_or_change(tmp_path: Path) -> None:
    env = cli_environ(tmp_path, config_text="version: 1\ncpu: true\n")
    # Spelled with an underscore, as the launcher accepts too; the message gives one spelling.
    message = refusal(run_cli(["launch", "--mixed_precision", "bf16", str(SCRIPT)], env, timeout=120))
    assert ("the launcher was told mixed_precision='bf16' by the launch flag `--mixed-precision bf16`. "
            in message), message
    assert ("Fix: drop `--mixed-precision bf16` from the `accelerate-core launch` command, or change "
            "it to `--mixed-precision fp16`") in message, message
    assert "config file" not in message and "ACCELERATE_CORE_" not in message, message


def test_a_flag_overriding_the_config_file_is_named_as_the_flag(tmp_path: Path) -> None:
    env = cli_environ(tmp_path, config_text="version: 1\ncpu: true\nmixed_precision: 'no'\n")
    message = refusal(run_cli(["launch", "--mixed-precision", "bf16", str(SCRIPT)], env, timeout=120))
    assert "by the launch flag `--mixed-precision bf16`" in message and "config file" not in message


def test_a_variable_set_by_hand_is_named_with_unset_as_the_fix(tmp_path: Path) -> None:
    # Outside the launcher (which drops stale ACCELERATE_CORE_* variables): plain python.
    env = cli_environ(tmp_path, extra={"ACCELERATE_CORE_MIXED_PRECISION": "bf16", "ACCELERATE_CORE_CPU": "1"})
    result = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True,
                            timeout=120, cwd=str(REPO_ROOT), check=False)
    message = refusal(result)
    assert message.startswith(
        "Accelerator(mixed_precision='fp16'): the environment variable ACCELERATE_CORE_MIXED_PRECISION=bf16, "
        "set outside `accelerate-core launch`, says mixed_precision='bf16'. "), message
    assert ("Fix: unset ACCELERATE_CORE_MIXED_PRECISION, or set ACCELERATE_CORE_MIXED_PRECISION=fp16; "
            "or drop mixed_precision='fp16' from the script's Accelerator(...)") in message, message
    assert "config file" not in message and "launch flag" not in message, message


def test_dry_run_shows_where_each_value_came_from(tmp_path: Path) -> None:
    env = cli_environ(tmp_path, config_text="version: 1\nmixed_precision: bf16\n")
    shown = run_cli(["launch", "--dry-run", "--no-cpu", str(SCRIPT)], env)
    assert shown.returncode == 0, describe(shown)
    assert f"source: ACCELERATE_CORE_MIXED_PRECISION from config file {env['ACCELERATE_CORE_CONFIG_FILE']}" \
        in shown.stdout, shown.stdout
    assert "source: ACCELERATE_CORE_CPU from flag --no-cpu" in shown.stdout, shown.stdout


# -- the connector's messages for the other rules ----------------------------------------------

FILE = SettingSource("config file", "/cfg/launch.yaml")


def conflict(call: object) -> str:
    with pytest.raises(ConflictingSettingsError) as info:
        call()  # type: ignore[operator]
    message = str(info.value)
    assert "Valid:" in message and "Fix:" in message
    return message


def test_switches_and_deepspeed_settings_name_their_source() -> None:
    cpu_flag = LaunchSettings(cpu=True, sources={"cpu": SettingSource("flag", "--cpu", "--cpu")})
    message = conflict(lambda: resolve_cpu(False, cpu_flag))
    assert "by the launch flag `--cpu`" in message and "change it to `--no-cpu`" in message, message

    backend = LaunchSettings(backend="ddp", sources={"backend": FILE})
    message = conflict(lambda: resolve_backend(DeepSpeedPlugin(), backend, 2))
    assert "the launcher was told backend='ddp' by the config file /cfg/launch.yaml (`backend: ddp`)" \
        in message, message
    assert "change `backend: ddp` to `backend: deepspeed`" in message, message

    stage = LaunchSettings(zero_stage=3, sources={"zero_stage": SettingSource("flag", "--zero-stage 3",
                                                                               "--zero-stage")})
    message = conflict(lambda: build_deepspeed_plugin(DeepSpeedPlugin(zero_stage=1), stage, 1))
    assert message.startswith("DeepSpeedPlugin(zero_stage=1): the launcher was told zero_stage=3 by the "
                              "launch flag `--zero-stage 3`"), message
    assert "change it to `--zero-stage 1`" in message, message


def test_a_no_precision_in_a_file_is_quoted_as_yaml_needs_it() -> None:
    fp32 = LaunchSettings(mixed_precision="no", sources={"mixed_precision": FILE})
    message = conflict(lambda: resolve_mixed_precision(True, None, fp32))
    assert message.startswith("Accelerator(fp16=True), i.e. mixed_precision='fp16': the launcher was told "
                              "mixed_precision='no' by the config file /cfg/launch.yaml"), message
    assert "change `mixed_precision: 'no'` to `mixed_precision: fp16`" in message, message
    assert "drop fp16=True from the script's Accelerator(...)" in message, message


def test_sources_travel_through_the_environment_and_a_stale_record_is_not_trusted() -> None:
    flag = SettingSource("flag", "--cpu", "--cpu")
    settings = LaunchSettings(mixed_precision="bf16", cpu=True,
                              sources={"mixed_precision": FILE, "cpu": flag})
    env = settings.to_environ()
    back = LaunchSettings.from_environ(env)
    assert back == settings and dict(back.sources) == dict(settings.sources)
    # The variable changed after the launcher wrote it: the record no longer applies.
    changed = LaunchSettings.from_environ({**env, "ACCELERATE_CORE_MIXED_PRECISION": "fp16"})
    variable = "ACCELERATE_CORE_MIXED_PRECISION"
    assert changed.source_of("mixed_precision") == SettingSource("environment", variable)
    assert changed.source_of("cpu").kind == "flag"
    # A record that does not parse only loses the sources, never the run.
    broken = LaunchSettings.from_environ({**env, SOURCES_VARIABLE: "{not json"})
    assert broken == settings and dict(broken.sources) == {}
    # Nothing set: no record at all (only what was said reaches the script).
    assert LaunchSettings().to_environ() == {}


# -- several processes: the error ends the output ----------------------------------------------

@pytest.mark.ddp
@pytest.mark.slow
def test_a_conflict_on_two_ranks_ends_the_output_once_below_torchruns_summary(tmp_path: Path) -> None:
    env = cli_environ(tmp_path / "cfg", config_text="version: 1\nmixed_precision: bf16\n")
    config = env["ACCELERATE_CORE_CONFIG_FILE"]
    log = tmp_path / "launch.log"
    with log.open("w") as sink:  # stdout and stderr together, as on a terminal
        launched = subprocess.run([*CLI, "launch", "--cpu", "--num-processes", "2", "--backend", "ddp",
                                   str(SCRIPT)], env=env, cwd=str(REPO_ROOT), stdout=sink,
                                  stderr=subprocess.STDOUT, timeout=180, check=False)
    out = log.read_text()
    assert launched.returncode == 1, out  # the failing rank's own exit code, as before
    lines = [line for line in out.splitlines() if line.strip()]
    final = ("accelerate-core launch: error: ConflictingSettingsError: Accelerator(mixed_precision='fp16'): "
             f"the launcher was told mixed_precision='bf16' by the config file {config}")
    assert lines[-1].startswith(final), out
    assert lines[-1].endswith("or drop mixed_precision='fp16' from the script's Accelerator(...)"), out
    assert sum(line.startswith("accelerate-core launch: error:") for line in lines) == 1, out
    # torchrun's summary: one line above it, not the FAILED / Root Cause block below it.
    assert lines[-2].startswith("accelerate-core launch: torchrun: rank "), out
    assert "(the first failure)" in lines[-2], out
    assert "Root Cause" not in out and "FAILED" not in out, out
    # The ranks' own tracebacks still come through, above.
    assert out.count(ERROR) >= 1, out


# -- the pieces of the report ---------------------------------------------------------------

def test_error_watch_passes_everything_on_and_keeps_each_core_error_once(tmp_path: Path) -> None:
    out = (tmp_path / "out.txt").open("w+", encoding="utf-8")
    watch = ErrorWatch(out)
    text = (b"progress 1\naccelerate_core.errors.ConflictingSettingsError: A: b. Valid: c. Fix: d\n"
            b"accelerate_core.errors.ConflictingSettingsError: A: b. Valid: c. Fix: d\n"
            b"accelerate_core.errors.NoSuchError: not one of ours\n"
            b"ValueError: not ours either\n"
            b"accelerate_core.errors.InvalidSettingError: last, unfinished")
    for start in range(0, len(text), 7):  # arbitrary chunks, lines split across them
        watch.feed(text[start:start + 7])
    watch.close()
    out.seek(0)
    assert out.read() == text.decode()
    assert watch.errors == [RankError("ConflictingSettingsError", "A: b. Valid: c. Fix: d"),
                            RankError("InvalidSettingError", "last, unfinished")]


def test_report_keeps_the_full_summary_when_no_rank_raised_a_core_error(tmp_path: Path) -> None:
    summary = tmp_path / "failure.json"
    summary.write_text(json.dumps({"full": "=====\nexitcode  : 3\n=====",
                                   "short": "torchrun: rank 1 exited"}))
    printed = tmp_path / "printed.txt"
    with printed.open("w") as out:
        report(summary, [], out)
    assert printed.read_text() == "=====\nexitcode  : 3\n=====\n"
    with printed.open("w") as out:
        report(summary, [RankError("InvalidSettingError", "x")], out)
    assert printed.read_text() == ("accelerate-core launch: torchrun: rank 1 exited\n\n"
                                   "accelerate-core launch: error: InvalidSettingError: x\n")
    with printed.open("w") as out:  # torchrun wrote no summary (stopped by a signal, ...)
        report(tmp_path / "missing.json", [RankError("InvalidSettingError", "x")], out)
    assert printed.read_text().strip() == "accelerate-core launch: error: InvalidSettingError: x"


def test_the_launcher_clears_a_stale_sources_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate_core.commands.launch import child_environment

    monkeypatch.setenv(SOURCES_VARIABLE, '{"cpu": {"kind": "flag", "where": "--cpu", "value": "1"}}')
    assert SOURCES_VARIABLE not in child_environment({})
