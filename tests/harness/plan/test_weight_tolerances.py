"""Per-task weight tolerances ([tolerances] weights_per_task, harness.plan.weight_tolerances): read
and validated with the matrix, applied to the final weights (and eval outputs) of half-precision
cells of the family and the tasks they name, and nowhere else."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import ToleranceError
from harness.plan.matrix import DEFAULT_PATH, load_matrix
from harness.plan.tolerances import parse_tolerances

FAMILY = {"fp16": {"plain": {"rtol": 1e-3, "atol": 2e-2, "reason": "r"}, "zero": {"rtol": 1e-3, "atol": 2e-2,
                                                                                   "reason": "r"}}}
ENTRY = """
[fp16.sgd_accum]
rtol = 0
atol = 3.6e-05
need = 1.76e-05
variant = "two_ranks_fsdp_half"
where = "state_dict/out.bias"
reason = "2 x the worst"
"""


def _table(tmp_path: Path, text: str = ENTRY, name: str = "weights.toml"):  # type: ignore[no-untyped-def]
    (tmp_path / "weights.toml").write_text(text)
    return parse_tolerances(tmp_path / "matrix.toml", {**FAMILY, "weights_per_task": name})


def test_an_entry_sharpens_only_the_weights_of_its_task_in_the_plain_family(tmp_path: Path) -> None:
    table = _table(tmp_path)
    for strategy in ("single", "ddp", "fsdp"):
        tolerance = table.for_cell("fp16", strategy, "sgd_accum")
        weights = tolerance.for_quantity("state_dict/out.bias")
        assert (weights.rtol, weights.atol) == (0.0, 3.6e-5)
        assert tolerance.for_quantity("eval/logits").atol == 2e-2  # other kinds keep the family's
    assert table.for_cell("fp16", "zero2", "sgd_accum").for_quantity("state_dict/w").atol == 2e-2
    assert table.for_cell("fp16", "ddp", "lm").for_quantity("state_dict/w").atol == 2e-2
    assert table.for_cell("fp16", "ddp").for_quantity("state_dict/w").atol == 2e-2


EVAL_ENTRY = """
[eval.fp16.sgd_accum]
rtol = 0.001
atol = 0.0044
need = 0.000242
variant = "two_ranks_fsdp_half"
where = "eval/logits"
reason = "2 x the worst eval atol need + the regeneration tolerance"
"""


def test_an_eval_entry_sharpens_only_the_eval_outputs_of_its_task_in_the_plain_family(tmp_path: Path) -> None:
    table = _table(tmp_path, ENTRY + EVAL_ENTRY)
    for strategy in ("single", "ddp", "fsdp"):
        tolerance = table.for_cell("fp16", strategy, "sgd_accum")
        logits = tolerance.for_quantity("eval/logits")
        assert (logits.rtol, logits.atol) == (1e-3, 4.4e-3)
        assert tolerance.for_quantity("state_dict/out.bias").atol == 3.6e-5  # its weight entry
        assert tolerance.for_quantity("losses").atol == 2e-2  # no entry: the family's
    assert table.for_cell("fp16", "zero3", "sgd_accum").for_quantity("eval/logits").atol == 2e-2
    assert table.for_cell("fp16", "ddp", "lm").for_quantity("eval/logits").atol == 2e-2
    only_eval = _table(tmp_path, EVAL_ENTRY).for_cell("fp16", "ddp", "sgd_accum")
    assert only_eval.for_quantity("state_dict/out.bias").atol == 2e-2


ZERO_ENTRIES = ENTRY.replace("[fp16.sgd_accum]", "[zero.fp16.sgd_accum]").replace("3.6e-05", "5.1e-05") + \
    EVAL_ENTRY.replace("[eval.fp16.sgd_accum]", "[zero.eval.fp16.sgd_accum]").replace("0.0044", "0.0061")


def test_a_zero_entry_sharpens_only_the_zero_familys_cells_of_its_task(tmp_path: Path) -> None:
    table = _table(tmp_path, ENTRY + ZERO_ENTRIES)
    for strategy in ("zero1", "zero2", "zero3"):
        tolerance = table.for_cell("fp16", strategy, "sgd_accum")
        assert tolerance.for_quantity("state_dict/out.bias").atol == 5.1e-5
        assert tolerance.for_quantity("eval/logits").atol == 6.1e-3
        assert tolerance.for_quantity("losses").atol == 2e-2  # no entry: the family's
    plain = table.for_cell("fp16", "ddp", "sgd_accum")
    assert (plain.for_quantity("state_dict/w").atol, plain.for_quantity("eval/logits").atol) == (3.6e-5, 2e-2)
    assert table.for_cell("fp16", "zero2", "lm").for_quantity("state_dict/w").atol == 2e-2
    only_zero = _table(tmp_path, ZERO_ENTRIES)
    assert only_zero.for_cell("fp16", "single", "sgd_accum").for_quantity("state_dict/w").atol == 2e-2


@pytest.mark.parametrize(("text", "says"), [
    ("zero = 3\n", "not a table"),
    ("[zero]\neval = 3\n", r"zero\.eval .*not a table"),
    (ZERO_ENTRIES.replace("[zero.fp16.sgd_accum]", "[zero.fp32.sgd_accum]"), r"\[zero\.fp32\] .*not a half"),
    (ZERO_ENTRIES.replace("[zero.eval.fp16.sgd_accum]", "[zero.eval.fp32.sgd_accum]"),
     r"\[zero\.eval\.fp32\] .*not a half"),

    (EVAL_ENTRY.replace("[eval.fp16.sgd_accum]", "[eval.fp32.sgd_accum]"),
     r"\[eval\.fp32\] .*not a half precision"),
    (EVAL_ENTRY.replace("need = 0.000242", "need = 0.01"), r"\[eval\.fp16\.sgd_accum\].*atol >= need"),
    ("eval = 3\n", "not a table"),
    (ENTRY.replace('variant = "two_ranks_fsdp_half"\n', ""), "its keys are"),
    (ENTRY.replace("atol = 3.6e-05", "atol = 1e-05"), "atol >= need"),
    (ENTRY.replace("[fp16.sgd_accum]", "[fp32.sgd_accum]"), "not a half precision"),
    (ENTRY.replace("atol = 3.6e-05", 'atol = "small"'), "not a number"),
    ("[fp16", "not valid TOML"),
])
def test_a_malformed_file_is_an_error_that_names_the_entry_and_the_fix(tmp_path: Path, text: str,
                                                                       says: str) -> None:
    with pytest.raises(ToleranceError, match=says) as raised:
        _table(tmp_path, text)
    assert "Fix:" in str(raised.value)


def test_a_missing_file_says_how_to_write_it(tmp_path: Path) -> None:
    with pytest.raises(ToleranceError, match="--write-weight-tolerances"):
        _table(tmp_path, name="absent.toml")


def test_the_repository_matrix_judges_quiet_tasks_by_their_own_noise() -> None:
    matrix = load_matrix()
    assert (DEFAULT_PATH.parent / "weight_tolerances.toml").is_file()
    entry = matrix.tolerances.weights[("plain", "bf16", "sgd_accum")]
    family = matrix.tolerance_for("bf16", "single").for_quantity("state_dict")
    assert entry.atol >= 2 * entry.need and entry.atol < family.atol
    # BatchNorm's passing 2-process cells synchronise it: measured by two_ranks_sync_batchnorm
    assert matrix.tolerances.weights[("plain", "bf16", "batchnorm")].variant == "two_ranks_sync_batchnorm"
    assert ("plain", "bf16", "dropout") not in matrix.tolerances.weights  # each rank's own masks: no variant
    without = load_matrix(weights_per_task=False)
    assert not without.tolerances.weights
