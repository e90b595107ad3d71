"""The implementation axis: ids gain `-{implementation}` only when it is not the core, the matrix
multiplies it in, a cell of an implementation that is not installed is skipped with the install
hint, and `--implementation` selects (core by default)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli.main import main
from harness.plan.availability import NO_IMPLEMENTATION, Host, check
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix

MATRIX = """
[axes]
task = ["regression"]
device = ["cpu"]
strategy = ["single", "ddp"]
precision = ["fp32"]
implementation = ["core", "accelerate"]

[[shapes]]
device = "cpu"
processes = 1
strategies = ["single"]

[[shapes]]
device = "cpu"
processes = 2
strategies = ["ddp"]

[tolerances.fp32.plain]
rtol = 1.3e-6
atol = 1e-5
reason = "a test's"
"""


def test_core_cells_keep_their_ids_and_others_end_in_the_implementation() -> None:
    core = Cell.from_id("lm-cpu2-zero3-bf16")
    assert core.implementation == "core" and core.id == "lm-cpu2-zero3-bf16"
    other = Cell.from_id("lm-cpu2-zero3-bf16-accelerate")
    assert (other.task, other.strategy, other.precision, other.implementation) == ("lm", "zero3", "bf16",
                                                                                   "accelerate")
    assert other.id == "lm-cpu2-zero3-bf16-accelerate" and other != core


def test_a_resume_cell_of_another_implementation_is_refused() -> None:
    with pytest.raises(ValueError, match="resume cell id"):
        Cell.from_id("lm-cpu2-zero3-bf16:cpu1-single-bf16-accelerate")


def test_the_matrix_multiplies_the_axis_and_cli_selects_core_by_default(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "matrix.toml"
    path.write_text(MATRIX)
    ids = [c.id for c in load_matrix(path).cells]
    assert ids == ["regression-cpu1-single-fp32", "regression-cpu2-ddp-fp32",
                   "regression-cpu1-single-fp32-accelerate", "regression-cpu2-ddp-fp32-accelerate"]
    assert main(["list", "--matrix", str(path)]) == 0
    assert "accelerate" not in capsys.readouterr().out.replace("Accelerate", "")
    assert main(["list", "--matrix", str(path), "--implementation", "accelerate"]) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = [line.split()[0] for line in lines if line.startswith("regression")]
    assert listed == ["regression-cpu1-single-fp32-accelerate", "regression-cpu2-ddp-fp32-accelerate"]
    assert main(["list", "--matrix", str(path), "--implementation", "all"]) == 0
    assert "4 cell(s)" in capsys.readouterr().out


def test_an_implementation_outside_the_axis_is_refused_with_the_valid_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--implementation", "lightning"]) == 2
    err = capsys.readouterr().err
    assert "lightning" in err and "'core'" in err and "Fix:" in err


def test_a_cell_of_an_implementation_not_installed_is_skipped_with_how_to_install_it() -> None:
    host = Host(cuda_devices=0, cpu_cores=2, deepspeed=True, cpu_native_fp16=False,
                implementations=frozenset({"core"}))
    verdict = check(Cell.from_id("regression-cpu1-single-fp32-accelerate"), host)
    assert not verdict.runnable and verdict.code == NO_IMPLEMENTATION
    assert '.[accelerate]' in verdict.reason
    assert check(Cell.from_id("regression-cpu1-single-fp32"), host).runnable
