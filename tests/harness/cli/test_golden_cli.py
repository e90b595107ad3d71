"""`python -m harness golden` on the repository's matrix: --check narrowed by --task checks that
golden only and names the exact command that rewrites it; --show prints a golden's numbers.
In-process (harness.cli.main.main), so only --check starts a process (the one making goldens)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli.main import main
from harness.golden.golden_store import load_golden, update_command
from harness.paths import MATRIX_PATH

# Reads the goldens: run again against goldens made elsewhere (nox -s foreign_goldens).
pytestmark = pytest.mark.goldens


def test_check_of_one_task_and_precision_checks_that_golden_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["golden", "--check", "--task", "regression", "--precision", "fp32"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")]
    assert lines[0].startswith("regression-fp32: ") and lines[-1].startswith("1 golden(s) reproduce")
    assert len(lines) == 2


def test_show_prints_every_step_and_tensor_of_a_golden(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["golden", "--show", "regression", "--precision", "fp32"]) == 0
    golden = load_golden("regression", "fp32")
    text = capsys.readouterr().out
    assert f"losses ({len(golden.losses)} micro-steps" in text
    assert f"{golden.losses[0]:.7g}" in text and f"{golden.losses[-1]:.7g}" in text
    for key in golden.state_dict:
        assert key in text
    assert "eval outputs" in text and "made on" in text


def test_a_task_the_matrix_does_not_have_is_refused_with_the_valid_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["--show", "nope"], ["--check", "--task", "nope"]):
        assert main(["golden", *args]) == 2
        error = capsys.readouterr().err
        assert "'nope'" in error and "'regression'" in error and "Fix:" in error, error


def test_the_fix_names_the_matrix_only_when_it_is_not_the_repositorys(tmp_path: Path) -> None:
    assert update_command("lm", "bf16", MATRIX_PATH) == (
        "python -m harness golden --update --task lm --precision bf16")
    other = tmp_path / "matrix.toml"
    assert update_command("my_task", "fp32", other) == (
        f"python -m harness golden --update --task my_task --precision fp32 --matrix {other}")
