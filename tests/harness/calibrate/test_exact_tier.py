"""The fp32 exact tier's measurement (harness.calibrate.exact_tier): a record is exact only when
every compared quantity equals its reduction-order reference bit for bit; one ulp anywhere is
named. The records here are the reference's own, computed in this process (no assumption about
which cells of a real run reach exactness on this machine: that is what the command measures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from harness.calibrate.exact_tier import check_exact, exact_lines
from harness.calibrate.reduction_order import reduction_order_perturbation
from harness.cli.main import main
from harness.golden.reference import ReferenceInputs, train_reference
from harness.layout.report_dir import ReportDir
from harness.plan.cell import Cell
from harness.tasks import get_task


def _run_dir(tmp_path: Path, records: dict[str, object], statuses: dict[str, str]) -> Path:
    folder = ReportDir(tmp_path / "run")
    folder.records.mkdir(parents=True)
    for cell_id, record in records.items():
        record.save(folder.record(cell_id))  # type: ignore[attr-defined]
    cells = [{"id": i, "status": s} for i, s in statuses.items()]
    folder.report_json.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    return folder.root


def _reference(cell_id: str) -> object:
    task, cell = get_task("regression"), Cell.from_id(cell_id)
    return train_reference(task, cell.precision, inputs=ReferenceInputs.of(task),
                           perturbation=reduction_order_perturbation(cell))


def test_a_cell_is_exact_only_bit_for_bit_and_one_ulp_is_named(tmp_path: Path) -> None:
    single, ddp = "regression-cpu1-single-fp32", "regression-cpu2-ddp-fp32"
    moved = _reference(ddp)
    name = sorted(moved.state_dict)[0]  # type: ignore[attr-defined]
    tensor = moved.state_dict[name]  # type: ignore[attr-defined]
    flat = tensor.view(-1)
    flat[0] = torch.nextafter(flat[0], torch.tensor(float("inf"), dtype=flat.dtype))
    half, unmodelled = "regression-cpu2-zero3-bf16", "batchnorm_sync-cpu2-zero2-bf16"
    run = _run_dir(tmp_path, {single: _reference(single), ddp: moved, half: _reference(half)},
                   {single: "passed", ddp: "passed", half: "passed", unmodelled: "passed",
                    "scalar-cpu1-single-fp32": "failed"})
    checks = {c.cell_id: c for c in check_exact(run)}
    # Only passing cells are measured; what no reference follows is said, not guessed.
    assert set(checks) == {single, ddp, half, unmodelled}
    assert checks[single].exact and checks[single].differing == {}
    assert checks[half].exact  # a ZeRO-3 bf16 cell against ZeRO-2/3's half precision
    assert not checks[unmodelled].checked and "zero2's half precision" in checks[unmodelled].why_not_checked
    assert not checks[ddp].exact
    assert list(checks[ddp].differing) == [f"state_dict/{name}"]
    elements, largest = checks[ddp].differing[f"state_dict/{name}"]
    assert elements == 1 and 0 < largest < 1e-6
    lines = exact_lines(list(checks.values()), run)
    assert lines[0].endswith("2 of 3 cells bit-identical to their reduction-order reference "
                             "(fp32 1 of 2, bf16 1 of 1; 1 not modelled)")


def test_the_splits_follow_the_cells_processes() -> None:
    assert reduction_order_perturbation(Cell.from_id("lm-cpu1-single-fp32")).splits == 1
    assert reduction_order_perturbation(Cell.from_id("lm-cpu2-zero3-fp32")).splits == 2


def test_the_reference_follows_each_backends_half_precision_and_synchronised_batchnorm() -> None:
    def half(cell_id: str) -> str:
        return reduction_order_perturbation(Cell.from_id(cell_id)).half_weights

    assert [half(f"lm-cpu2-{s}-bf16") for s in ("ddp", "zero1", "zero2", "zero3", "fsdp")] == \
        ["", "zero1", "zero2", "zero2", "fsdp"]
    assert half("lm-cpu2-zero1-fp32") == "" and half("lm-cpu1-single-fp16") == ""
    assert reduction_order_perturbation(Cell.from_id("batchnorm_sync-cpu2-ddp-fp32")).sync_batchnorm
    assert not reduction_order_perturbation(Cell.from_id("batchnorm_sync-cpu1-single-fp32")).sync_batchnorm
    assert not reduction_order_perturbation(Cell.from_id("batchnorm-cpu2-ddp-fp32")).sync_batchnorm


def test_a_clipping_task_takes_its_norm_as_each_sharding_backend_does() -> None:
    def clip(cell_id: str) -> tuple[str, str]:
        perturbation = reduction_order_perturbation(Cell.from_id(cell_id))
        return perturbation.clip_style, perturbation.name

    assert [clip(f"clip_norm-cpu2-{s}-fp32")[0] for s in ("ddp", "zero1", "zero2", "zero3", "fsdp")] == \
        ["", "zero12", "zero12", "zero3", "fsdp"]
    assert clip("clip_norm-cpu1-single-bf16") == ("", "splits_1")
    # ZeRO-2 and ZeRO-3 share a half precision but not a clip: their references are told apart.
    assert clip("clip_norm-cpu2-zero2-bf16")[1] == "splits_2_zero2_clip_zero12"
    assert clip("clip_norm-cpu2-zero3-bf16")[1] == "splits_2_zero2_clip_zero3"
    assert clip("lm-cpu2-zero3-bf16") == ("", "splits_2_zero2")  # a task that does not clip


def test_the_command_refuses_a_folder_without_a_report(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--exact-tier", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "--exact-tier" in out and "no report.json there" in out and "Fix:" in out
