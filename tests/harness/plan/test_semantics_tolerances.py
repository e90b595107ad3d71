"""The own-semantics check's tolerance file (harness.plan.semantics_tolerances): parsed with the
matrix, every malformed entry a clear error, and the repository's file up to date with its matrix:
every half-precision cell the check judges has a measured entry."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.calibrate.semantics_noise import semantics_scope
from harness.errors import ToleranceError
from harness.paths import MATRIX_PATH
from harness.plan.matrix import load_matrix

ENTRY = """
[bf16.sgd_accum.splits_2_zero2]
rtol = 0
atol = 1e-05
need = 0
variant = ""
where = ""
reason = "the floor"
"""


def _matrix_with(tmp_path: Path, semantics_file: str | None) -> Path:
    for name in ("matrix.toml", "weight_tolerances.toml"):
        shutil.copy(MATRIX_PATH.parent / name, tmp_path / name)
    shutil.copytree(MATRIX_PATH.parent / "golden", tmp_path / "golden")
    if semantics_file is not None:
        (tmp_path / "semantics_tolerances.toml").write_text(semantics_file, encoding="utf-8")
    return tmp_path / "matrix.toml"


def test_an_entry_is_read_with_its_measurement(tmp_path: Path) -> None:
    table = load_matrix(_matrix_with(tmp_path, ENTRY)).tolerances
    [entry] = table.semantics.values()
    assert entry.key == ("bf16", "sgd_accum", "splits_2_zero2") and entry.atol == 1e-5 and entry.rtol == 0


@pytest.mark.parametrize(("text", "says"), [
    (ENTRY.replace("need = 0", "need = 1"), "atol >= need"),
    (ENTRY.replace('reason = "the floor"\n', ""), "its keys are"),
    (ENTRY.replace("[bf16.", "[fp32."), "not a half precision"),
    (ENTRY.replace("atol = 1e-05", 'atol = "small"'), "not a number"),
    ("[bf16.sgd_accum]\nsplits_2 = 3\n", "its keys are"),
    ("[bf16]\nsgd_accum = 3\n", "not a table of semantics"),
    ("[bf16.sgd_accum", "not valid TOML"),
])
def test_a_malformed_entry_is_an_error_naming_it(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ToleranceError, match=says):
        load_matrix(_matrix_with(tmp_path, text))


def test_a_missing_file_is_an_error_that_says_how_to_write_it(tmp_path: Path) -> None:
    with pytest.raises(ToleranceError, match=r"does not exist.*--write-weight-tolerances"):
        load_matrix(_matrix_with(tmp_path, None))


def test_the_repositorys_file_covers_every_cell_the_check_judges() -> None:
    matrix = load_matrix()
    scopes = semantics_scope(matrix)
    missing = [scope.key for scope in scopes if scope.key not in matrix.tolerances.semantics]
    assert scopes and not missing, f"rerun `python -m harness calibrate --write-weight-tolerances`: {missing}"
    assert {scope.key[2] for scope in scopes} >= {"splits_1", "splits_2", "splits_2_zero1", "splits_2_zero2",
                                                  "splits_2_fsdp"}
