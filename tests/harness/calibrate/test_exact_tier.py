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
    task = get_task("regression")
    return train_reference(task, "fp32", inputs=ReferenceInputs.of(task),
                           perturbation=reduction_order_perturbation(Cell.from_id(cell_id)))


def test_a_cell_is_exact_only_bit_for_bit_and_one_ulp_is_named(tmp_path: Path) -> None:
    single, ddp = "regression-cpu1-single-fp32", "regression-cpu2-ddp-fp32"
    moved = _reference(ddp)
    name = sorted(moved.state_dict)[0]  # type: ignore[attr-defined]
    tensor = moved.state_dict[name]  # type: ignore[attr-defined]
    flat = tensor.view(-1)
    flat[0] = torch.nextafter(flat[0], torch.tensor(float("inf"), dtype=flat.dtype))
    run = _run_dir(tmp_path, {single: _reference(single), ddp: moved},
                   {single: "passed", ddp: "passed", "batchnorm_sync-cpu2-ddp-fp32": "passed",
                    "regression-cpu1-single-bf16": "passed", "scalar-cpu1-single-fp32": "failed"})
    checks = {c.cell_id: c for c in check_exact(run)}
    # Only passing fp32 cells are measured; a split-dependent task is said, not guessed.
    assert set(checks) == {single, ddp, "batchnorm_sync-cpu2-ddp-fp32"}
    assert checks[single].exact and checks[single].differing == {}
    assert not checks[ddp].exact
    assert list(checks[ddp].differing) == [f"state_dict/{name}"]
    elements, largest = checks[ddp].differing[f"state_dict/{name}"]
    assert elements == 1 and 0 < largest < 1e-6
    assert not checks["batchnorm_sync-cpu2-ddp-fp32"].checked
    lines = exact_lines(list(checks.values()), run)
    assert lines[0].endswith("1 of 2 fp32 cells bit-identical to their reduction-order reference "
                             "(1 not modelled)")


def test_the_splits_follow_the_cells_processes() -> None:
    assert reduction_order_perturbation(Cell.from_id("lm-cpu1-single-fp32")).splits == 1
    assert reduction_order_perturbation(Cell.from_id("lm-cpu2-zero3-fp32")).splits == 2


def test_the_command_refuses_a_folder_without_a_report(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--exact-tier", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "--exact-tier" in out and "no report.json there" in out and "Fix:" in out
