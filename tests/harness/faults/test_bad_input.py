"""Issue 7: every bad input gets a clear message (given, why wrong, valid choices, fix) and a
non-zero exit, from the command a person uses (`python -m harness`, `accelerate-core`).

The commands' own main(argv) runs in this process (run_harness_in_process, run_in_process: the
exit status, stdout, stderr and any traceback a subprocess would give). Real subprocesses where
the process is the point: `accelerate-core` through its console entry point
(test_launch_with_missing_script, and the DeepSpeed fp16 refusal, which launches a script), and
the fp16 skip, whose oneDNN cap must be in the environment before torch starts in the runner.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from accelerate_core.commands.main import main as core_main
from accelerate_core.imports import is_deepspeed_available
from harness.judge.cell_verdict import judge_record
from harness.judge.outcome import Status
from harness.paths import GOLDEN_DIR
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from tests.cpu_paths import WITHOUT_NATIVE_FP16
from tests.harness.runner_helpers import (
    SMALL_MATRIX,
    cells_by_id,
    golden_as_record,
    run_harness,
    run_harness_in_process,
    run_in_process,
    write_matrix,
)
from tests.run_if import run_if

EXIT_USAGE = 2


def assert_explained(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Non-zero exit; the message names what was given, says Valid: and Fix:, no traceback."""
    message = done.stderr + done.stdout
    assert done.returncode != 0, message
    assert "Valid:" in message and "Fix:" in message, message
    assert "Traceback" not in message, message
    for fragment in fragments:
        assert fragment in message, message


def test_invalid_toml(tmp_path: Path) -> None:
    bad = tmp_path / "matrix.toml"
    bad.write_text('[axes]\ntask = ["regression"\n')
    done = run_harness_in_process("list", "--matrix", str(bad))
    assert done.returncode == EXIT_USAGE
    assert_explained(done, "not valid TOML", "line")


@pytest.mark.parametrize(("text", "command", "fragments"), [
    ("", "list", ["it has no [axes] table", "a task axis in [axes]", "regression", "harness init DIR"]),
    ("# nothing yet\n", "run", ["it has no [axes] table", "[[shapes]]"]),
    ('[axes]\ndevice = ["cpu"]\n\n[[shapes]]\ndevice = "cpu"\nprocesses = 1\nstrategies = ["single"]\n',
     "run", ["its [axes] table has no task axis", "tasks = ['mypkg.tasks']", "add a task axis"]),
    ('[axes]\ntask = ["regression"]\n', "list",
     ["it has no [[shapes]] entries", "device = 'cpu', processes = 1", "add [[shapes]] entries"]),
], ids=["empty", "comment-only", "no-task-axis", "no-shapes"])
def test_a_matrix_without_tasks_or_shapes_says_what_is_missing(
        tmp_path: Path, text: str, command: str, fragments: list[str]) -> None:
    """Not "selection (none): it matches no cell": the part of the file that is missing."""
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(text)
    args = ["--report-dir", str(tmp_path / "report")] if command == "run" else []
    done = run_harness_in_process(command, "--matrix", str(matrix), *args)
    assert done.returncode == EXIT_USAGE
    assert_explained(done, f"matrix file '{matrix}'", *fragments)
    assert "matches no cell" not in done.stderr + done.stdout


def test_unknown_axis_value(tmp_path: Path) -> None:
    matrix = write_matrix(
        tmp_path, SMALL_MATRIX.replace('strategy = ["single", "ddp"]', 'strategy = ["zero4"]')
    )
    done = run_harness_in_process("run", "--matrix", str(matrix))
    assert done.returncode == EXIT_USAGE
    assert_explained(done, "'zero4'", "not a valid strategy", "'zero3'")


def test_unknown_task(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path, SMALL_MATRIX.replace('task = ["regression"]', 'task = ["regresion"]'))
    done = run_harness_in_process("list", "--matrix", str(matrix))
    assert done.returncode == EXIT_USAGE
    assert_explained(done, "'regresion'", "no task of that name", "'regression'")


def test_selection_matching_nothing(tmp_path: Path) -> None:
    done = run_harness_in_process("run", "--matrix", str(write_matrix(tmp_path)), "-k", "zero3 and fp8")
    assert done.returncode == EXIT_USAGE
    assert_explained(done, "-k 'zero3 and fp8'", "matches no cell", "python -m harness list")


def test_selection_that_does_not_parse(tmp_path: Path) -> None:
    done = run_harness_in_process("list", "--matrix", str(write_matrix(tmp_path)), "-m", "deepspeed and (")
    assert done.returncode == EXIT_USAGE
    assert_explained(done, "does not parse")


@pytest.mark.nodeepspeed
def test_environment_name_unknown_or_not_this_one(tmp_path: Path) -> None:
    matrix = SMALL_MATRIX + "\n[environments.a]\ndeepspeed = true\n[environments.b]\ndeepspeed = false\n"
    path = write_matrix(tmp_path, matrix)
    unknown = run_harness_in_process(
        "run", "--matrix", str(path), "--env-name", "c", "--report-dir", str(tmp_path / "r")
    )
    assert_explained(unknown, "--env-name 'c'", "no such environment", "'a', 'b'")
    wrong = "b" if is_deepspeed_available() else "a"
    mismatch = run_harness_in_process(
        "run", "--matrix", str(path), "--env-name", wrong, "--report-dir", str(tmp_path / "r")
    )
    assert_explained(mismatch, f"--env-name '{wrong}'", "but deepspeed is")


def test_report_dir_not_writable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    done = run_harness_in_process(
        "run", "--matrix", str(write_matrix(tmp_path)), "--report-dir", str(blocker / "reports")
    )
    assert done.returncode == EXIT_USAGE
    assert_explained(done, "cannot be written", "--report-dir")


def test_resume_from_a_dir_without_report(tmp_path: Path) -> None:
    done = run_harness_in_process("run", "--matrix", str(write_matrix(tmp_path)), "--resume",
                                  str(tmp_path / "nothing"))
    assert_explained(done, "--resume", "report.json")


def test_compare_records_without_records(tmp_path: Path) -> None:
    done = run_harness_in_process(
        "run",
        "--matrix",
        str(write_matrix(tmp_path)),
        "--compare-records",
        str(tmp_path),
        "--report-dir",
        str(tmp_path / "r"),
    )
    assert_explained(done, "--compare-records", "no records/ folder")


@pytest.mark.nodeepspeed
@pytest.mark.numerics
def test_fp16_deepspeed_on_cpu_without_emulation_is_skipped_with_the_reason(tmp_path: Path) -> None:
    # A CPU without native fp16: this one's, or this one with oneDNN capped below it.
    matrix = SMALL_MATRIX.replace('strategy = ["single", "ddp"]', 'strategy = ["zero1"]')
    matrix = matrix.replace('precision = ["fp32"]', 'precision = ["fp16"]').replace('["ddp"]', '["zero1"]')
    report_dir = tmp_path / "r"
    done = run_harness(  # a subprocess: DNNL_MAX_CPU_ISA must be set before torch starts
        "run",
        "--matrix",
        str(write_matrix(tmp_path, matrix)),
        "--no-emulation",
        "-k",
        "cpu2",
        "--report-dir",
        str(report_dir),
        "--allow-empty",  # its one cell is skipped: a run with nothing to do is what this test makes
        env=WITHOUT_NATIVE_FP16,
    )
    assert done.returncode == 0, done.stderr
    cell = cells_by_id(report_dir)["regression-cpu2-zero1-fp16"]
    expected = "deepspeed is not installed" if not is_deepspeed_available() else "needs emulation"
    assert cell["status"] == "skipped" and expected in cell["reason"]


# ----------------------------------------------------------------------------------- goldens
# Judged through the runner's judging step, with a real record (a copy of the checked-in
# regression golden, so no launch is needed) against a golden directory broken on purpose.
GOLDENS = GOLDEN_DIR  # the repository's, or HARNESS_GOLDEN_DIR's (foreign goldens)


@pytest.fixture
def broken_goldens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import harness.golden.golden_store

    golden_dir = tmp_path / "golden"
    golden_dir.mkdir()
    for suffix in (".json", ".safetensors"):
        shutil.copy(GOLDENS / f"regression-fp32{suffix}", golden_dir / f"regression-fp32{suffix}")
    golden_as_record(GOLDENS / "regression-fp32", tmp_path / "regression-cpu1-single-fp32")
    monkeypatch.setattr(harness.golden.golden_store, "GOLDEN_DIR", golden_dir)
    return golden_dir


def _judge(tmp_path: Path) -> tuple[Status, str]:
    cell = Cell.from_id("regression-cpu1-single-fp32")
    result = judge_record(cell, tmp_path / cell.id, duration_s=1.0, emulated=False, env_name="t",
                          matrix=load_matrix())
    return result.status, result.reason


@pytest.mark.goldens
def test_golden_intact_passes(broken_goldens: Path, tmp_path: Path) -> None:
    assert _judge(tmp_path)[0] == Status.PASSED  # the fixture itself is sound


@pytest.mark.goldens
def test_golden_missing(broken_goldens: Path, tmp_path: Path) -> None:
    (broken_goldens / "regression-fp32.json").unlink()
    status, reason = _judge(tmp_path)
    assert (
        status == Status.ERROR and "there is no golden for task 'regression'" in reason and "Fix:" in reason
    )


@pytest.mark.goldens
def test_golden_truncated(broken_goldens: Path, tmp_path: Path) -> None:
    tensors = broken_goldens / "regression-fp32.safetensors"
    tensors.write_bytes(tensors.read_bytes()[: tensors.stat().st_size // 2])
    status, reason = _judge(tmp_path)
    assert status == Status.ERROR and "GoldenError" in reason and "unusable" in reason


@pytest.mark.goldens
def test_golden_tampered(broken_goldens: Path, tmp_path: Path) -> None:
    tensors = broken_goldens / "regression-fp32.safetensors"
    data = bytearray(tensors.read_bytes())
    data[-1] ^= 0x01  # one bit of the last tensor value
    tensors.write_bytes(bytes(data))
    status, reason = _judge(tmp_path)
    assert status == Status.ERROR and "GoldenError" in reason and "sha256" in reason


@pytest.mark.goldens
def test_golden_made_for_another_task_definition(broken_goldens: Path, tmp_path: Path) -> None:
    import json

    from harness.record.record_format import json_sha256

    meta = broken_goldens / "regression-fp32.json"
    body = json.loads(meta.read_text())
    definition = body["meta"]["golden"]["task_definition_hash"]
    body["meta"]["golden"]["task_definition_hash"] = "0" * len(definition)
    body["json_sha256"] = json_sha256(body)  # a golden made for that definition is whole (format 2)
    meta.write_text(json.dumps(body))
    status, reason = _judge(tmp_path)
    assert status == Status.ERROR and "made for another task definition" in reason


# ------------------------------------------------------------------ the core's CLI, end to end
def core(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`accelerate-core ARGS` through its console entry point, a real process."""
    exe = Path(shutil.which("accelerate-core") or "accelerate-core")
    return subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def core_in_process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`accelerate-core ARGS` as accelerate_core.commands.main.main in this process."""
    return run_in_process(core_main, args, name="accelerate-core", timeout=120, cwd=cwd)


def test_config_yaml_with_unknown_keys(tmp_path: Path) -> None:
    (tmp_path / "cfg.yaml").write_text("version: 1\nbackend: ddp\nnum_proceses: 2\n")
    (tmp_path / "s.py").write_text("print('never runs')\n")
    done = core_in_process("launch", "--config-file", "cfg.yaml", "s.py", cwd=tmp_path)
    assert_explained(done, "unknown key(s) 'num_proceses'", "did you mean 'num_processes'")
    assert "never runs" not in done.stdout


@pytest.mark.parametrize("where", ["flag", "config"])
def test_zero_stage_4(tmp_path: Path, where: str) -> None:
    (tmp_path / "s.py").write_text("print('never runs')\n")
    (tmp_path / "cfg.yaml").write_text("version: 1\nbackend: deepspeed\nzero_stage: 4\n")
    args = ["--zero-stage", "4"] if where == "flag" else ["--config-file", "cfg.yaml"]
    done = core_in_process("launch", *args, "s.py", cwd=tmp_path)
    assert_explained(done, "4", "0, 1, 2, 3")


def test_launch_with_missing_script(tmp_path: Path) -> None:
    done = core("launch", "missing.py", cwd=tmp_path)
    assert_explained(done, "'missing.py'", "no such file")


FP16_SCRIPT = """
import torch
from accelerate_core import Accelerator
accelerator = Accelerator()
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4)
accelerator.prepare(model, optimizer, data)
print("prepared")
"""


@pytest.mark.deepspeed
@pytest.mark.numerics
@run_if(deepspeed=True)
def test_fp16_deepspeed_on_cpu_without_emulation_is_refused_by_the_core(tmp_path: Path) -> None:
    # A CPU without native fp16: this one's, or this one with oneDNN capped below it.
    (tmp_path / "s.py").write_text(FP16_SCRIPT)
    done = core(
        "launch",
        "--backend",
        "deepspeed",
        "--zero-stage",
        "2",
        "--mixed-precision",
        "fp16",
        "--cpu",
        "s.py",
        cwd=tmp_path,
        env=WITHOUT_NATIVE_FP16,
    )
    assert done.returncode != 0 and "prepared" not in done.stdout
    message = done.stderr + done.stdout
    assert (
        "UnsupportedPrecisionError" in message and "Valid:" in message and "--cpu-fp16-emulation" in message
    )


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_timeout_must_be_positive_seconds(value: str) -> None:
    done = run_harness_in_process("run", "--timeout", value)
    assert done.returncode == EXIT_USAGE
    assert_explained(done, f"--timeout '{value}'", "positive number of seconds")
