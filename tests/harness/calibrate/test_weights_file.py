"""`calibrate --write-weight-tolerances` (harness.calibrate.weights_file): each task's own weight
tolerance from its measured noise, and what it buys: a 2% gradient error in a bf16 cell of
`sgd_accum` fails with the tolerances in force, where the family-wide ones let 15% through."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from harness.calibrate.noise import Need
from harness.calibrate.weights_file import (
    below_noise,
    keep_wider_entries,
    weight_tolerances,
    write_weight_tolerances,
)
from harness.golden.golden_store import load_golden
from harness.golden.reference import Perturbation, train_reference
from harness.golden.regeneration import regeneration_tolerance
from harness.judge.compare import compare_record
from harness.judge.output_dtype import expected_output_dtype
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.plan.tolerances import parse_tolerances
from harness.plan.weight_tolerances import WeightTolerance
from harness.tasks import get_task


def _need(task: str, max_abs: float, precision: str = "bf16", family: str = "plain",
          kind: str = "state_dict", variant: str = "two_ranks") -> Need:
    return Need(precision, family, kind, variant, task, 0.0, 0.0, 0.0, "state_dict/w", max_abs,
                "state_dict/w")


def test_the_atol_is_the_safety_factor_times_the_noise_rounded_up_and_never_below_fp32s() -> None:
    table = load_matrix(weights_per_task=False).tolerances
    needs = [_need("sgd_accum", 1.19e-4), _need("sgd_accum", 3e-5), _need("regression", 1e-7),
             _need("lm", 1.0), _need("dropout", 1e-6), _need("batchnorm", 3e-3),
             _need("sgd_accum", 9.0, family="zero"), _need("sgd_accum", 9.0, precision="fp32"),
             _need("sgd_accum", 9.0, kind="eval")]
    written = weight_tolerances(needs, table, safety=2.0)
    by_task = {e.task: e for e in written.entries if e.kind == "state_dict" and e.family == "plain"}
    assert by_task["sgd_accum"].atol == pytest.approx(2.4e-4) and by_task["sgd_accum"].need == 1.19e-4
    assert by_task["regression"].atol == table.entries[("fp32", "plain")].atol  # the fp32 floor
    # BatchNorm's noise is measured (two_ranks_sync_batchnorm); dropout's split is not
    assert set(by_task) == {"sgd_accum", "regression", "batchnorm", "lm"}
    # lm's noise (1.0) puts its entry above the family's atol: written, and said so
    assert by_task["lm"].atol == 2.0
    assert any(line.startswith("plain bf16 lm final weights") for line in written.wider)
    assert any(line.startswith("plain bf16 dropout") and "split" in line for line in written.skipped)
    assert [e.task for e in written.entries if e.kind == "eval"] == ["sgd_accum"]  # from the eval need
    # The zero need came from a variant that does not reproduce DeepSpeed's half weights: no entry.
    assert not [e for e in written.entries if e.family == "zero"]
    assert any(line.startswith("zero bf16 sgd_accum") and "DeepSpeed" in line for line in written.skipped)


def test_a_zero_entry_needs_a_variant_that_reproduces_deepspeeds_half_precision() -> None:
    table = load_matrix(weights_per_task=False).tolerances
    needs = [_need("sgd_accum", 1e-4, family="zero", variant="two_ranks_zero2_half"),
             _need("sgd_accum", 3e-5, family="zero"),  # another variant, smaller: the DeepSpeed one's counts
             _need("shuffle", 1e-4, family="zero"),  # no DeepSpeed variant ran it: no entry
             _need("batchnorm", 1e-4, family="zero", variant="two_ranks_sync_batchnorm"),
             _need("sgd_accum", 7e-5)]
    written = weight_tolerances(needs, table, safety=2.0)
    entries = {e.key: e for e in written.entries}
    assert set(entries) == {("zero", "bf16", "sgd_accum"), ("plain", "bf16", "sgd_accum")}
    zero = entries[("zero", "bf16", "sgd_accum")]
    assert (zero.atol, zero.variant) == (pytest.approx(2e-4), "two_ranks_zero2_half")
    assert zero.section == "zero.bf16.sgd_accum"
    assert entries[("plain", "bf16", "sgd_accum")].atol == pytest.approx(1.4e-4)  # each family its own
    assert sum(line.startswith(("zero bf16 shuffle", "zero bf16 batchnorm")) for line in written.skipped) == 2


def test_an_eval_entry_is_twice_the_noise_plus_how_far_a_regenerated_golden_may_move() -> None:
    table = load_matrix(weights_per_task=False).tolerances
    moved = regeneration_tolerance("fp16").atol
    quiet = Need("fp16", "plain", "eval", "two_ranks", "sgd_accum", 2.4e-4, 1e-3, 0.0, "eval/logits")
    noisy = Need("fp16", "plain", "eval", "two_ranks", "lm", 9e-3, 1e-3, 0.0, "eval/logits")
    written = weight_tolerances([quiet, noisy, _need("sgd_accum", 1e-4)], table, 2.0)
    evals = {e.task: e for e in written.entries if e.kind == "eval"}
    assert evals["sgd_accum"].atol == pytest.approx(2 * 2.4e-4 + moved, rel=0.02)
    assert evals["sgd_accum"].rtol == table.entries[("fp16", "plain")].for_quantity("eval").rtol
    assert evals["lm"].atol > table.entries[("fp16", "plain")].for_quantity("eval").atol  # wider: said so
    assert any(line.startswith("plain fp16 lm eval outputs") for line in written.wider)
    assert [e.kind for e in written.entries if e.task == "sgd_accum"] == ["state_dict", "eval"]


def test_keep_wider_keeps_each_entrys_larger_need_and_lists_both_machines(tmp_path: Path) -> None:
    table = load_matrix(weights_per_task=False).tolerances
    floors = {"plain": table.entries[("fp32", "plain")].atol, "zero": table.entries[("fp32", "zero")].atol}
    earlier = weight_tolerances([_need("sgd_accum", 3e-4), _need("shuffle", 1e-4),
                                 _need("lm", 4e-4, family="zero", variant="two_ranks_zero1_half")],
                                table, 2.0)
    stale = WeightTolerance("bf16", "dropout", 0.0, 1e-3, 5e-4, "this_machine", "state_dict/w", "old")
    write_weight_tolerances(tmp_path / "w.toml", replace(earlier, entries=[*earlier.entries, stale]), 2.0)
    (tmp_path / "w.toml").write_text((tmp_path / "w.toml").read_text().replace(
        "measured_on = ", 'measured_on = "Another CPU, x86_64, torch 2.13.0+cpu"\n# was: ', 1))
    here = weight_tolerances([_need("sgd_accum", 1e-4), _need("shuffle", 2e-4), _need("regression", 5e-5),
                              _need("dropout", 1.0),
                              _need("lm", 1e-4, family="zero", variant="two_ranks_zero2_half")], table, 2.0)
    merged = keep_wider_entries(here, tmp_path / "w.toml", 2.0, floors)
    assert [e.need for e in merged.entries if e.family == "zero"] == [4e-4]  # per family: the file's
    by_task = {e.task: e for e in merged.entries if e.family == "plain"}
    assert (by_task["sgd_accum"].need, by_task["sgd_accum"].atol) == (3e-4, pytest.approx(6e-4))  # the file's
    assert (by_task["shuffle"].need, by_task["shuffle"].atol) == (2e-4, pytest.approx(4e-4))  # this machine's
    assert by_task["regression"].need == 5e-5  # only measured here
    assert "dropout" not in by_task  # skipped here (split-dependent): the file's entry is not kept
    assert merged.measured_on[0] == "Another CPU, x86_64, torch 2.13.0+cpu" and len(merged.measured_on) == 2
    write_weight_tolerances(tmp_path / "merged.toml", merged, 2.0)
    read = parse_tolerances(tmp_path / "matrix.toml", {"weights_per_task": "merged.toml"}).weights
    assert read == {e.key: e for e in merged.entries}


def test_the_written_file_reads_back_as_written(tmp_path: Path) -> None:
    table = load_matrix(weights_per_task=False).tolerances
    written = weight_tolerances([_need("sgd_accum", 1.19e-4), _need("shuffle", 2.55e-5),
                                 _need("shuffle", 3e-4, family="zero", variant="two_ranks_zero2_half"),
                                 _need("shuffle", 3e-4, family="zero", kind="eval",
                                       variant="two_ranks_zero2_half")],
                                table, 2.0)
    write_weight_tolerances(tmp_path / "w.toml", written, 2.0)
    text = (tmp_path / "w.toml").read_text()
    assert "[zero.bf16.shuffle]" in text and "[zero.eval.bf16.shuffle]" in text
    tables = parse_tolerances(tmp_path / "matrix.toml", {"weights_per_task": "w.toml"})
    assert tables.weights == {e.key: e for e in written.entries if e.kind == "state_dict"}
    assert tables.eval_outputs == {e.key: e for e in written.entries if e.kind == "eval"}


def test_noise_above_a_tolerance_in_force_is_reported() -> None:
    table = load_matrix().tolerances
    for family in ("plain", "zero"):
        entry = table.weights[(family, "bf16", "sgd_accum")]
        assert below_noise([_need("sgd_accum", entry.atol / 2, family=family)], table) == []
        [line] = below_noise([_need("sgd_accum", entry.atol * 1.5, family=family)], table)
        assert f"{family} bf16 sgd_accum" in line and "above the atol" in line


@pytest.mark.goldens
@pytest.mark.parametrize(("perturbation", "cell_id", "passes"), [
    (Perturbation(name="this_machine"), "sgd_accum-cpu1-single-bf16", True),
    (Perturbation(splits=2, half_weights="fsdp", name="two_ranks_fsdp_half"), "sgd_accum-cpu2-fsdp-bf16",
     True),
    (Perturbation(gradient_scale=1.02, name="gradients x 1.02"), "sgd_accum-cpu1-single-bf16", False),
])
def test_a_bf16_cell_of_sgd_accum_fails_with_gradients_times_1_02(perturbation: Perturbation, cell_id: str,
                                                                  passes: bool) -> None:
    # The reference stands in for a bf16 cell (benign, or with every gradient 2% too large),
    # judged with the tolerance such a cell gets from the repository's matrix, as such a cell is.
    cell = Cell.from_id(cell_id)
    tolerance = load_matrix().tolerance_for("bf16", cell.strategy, "sgd_accum")
    record = train_reference(get_task("sgd_accum"), "bf16", perturbation=perturbation)
    failing = [c.quantity for c in compare_record(record, load_golden("sgd_accum", "bf16"), tolerance,
                                                  expected_output_dtype(cell)) if not c.ok]
    assert (not failing) is passes, failing
    if not passes:
        assert any(q.startswith("state_dict/") for q in failing)


@pytest.mark.goldens
def test_the_weight_tolerances_in_force_cover_this_machines_benign_noise() -> None:
    # Measured here, whatever machine wrote the file: a tolerance below this CPU's noise would fail
    # correct cells on it (calibrate exits 1 for the same reason).
    from harness.calibrate.noise import measure
    from harness.plan.weight_tolerances import HALF_PRECISIONS

    table = load_matrix().tolerances
    tasks = sorted({task for _, _, task in table.weights})
    assert below_noise(measure(tasks, HALF_PRECISIONS, table), table) == []
