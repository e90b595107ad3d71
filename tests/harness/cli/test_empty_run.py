"""No empty green: a run in which every selected cell was skipped exits 5 with the reasons,
unless --allow-empty says a run with nothing to do is fine."""

from __future__ import annotations

from pathlib import Path

from harness.cli.empty_run import EXIT_NOTHING_RAN, nothing_ran, nothing_ran_message
from harness.judge.outcome import CellResult, Status
from harness.plan.cell import Cell
from tests.harness.runner_helpers import cells_by_id, run_harness, write_matrix


def _result(cell_id: str, status: Status, reason: str = "") -> CellResult:
    return CellResult(cell=Cell.from_id(cell_id), status=status, reason=reason)


def test_only_skips_is_nothing_ran_and_the_message_counts_the_reasons() -> None:
    skips = [_result(f"regression-cuda{n}-ddp-fp32", Status.SKIPPED, "needs 2 CUDA devices, found 0")
             for n in (2, 2)] + [_result("lm-cuda1-single-fp32", Status.SKIPPED, "needs 1 CUDA device")]
    assert nothing_ran(skips)
    message = nothing_ran_message(skips, "gpu")
    assert message.startswith("environment gpu: 0 of 3 selected cell(s) could run here")
    assert "2 x needs 2 CUDA devices, found 0; 1 x needs 1 CUDA device" in message
    assert "--allow-empty" in message
    assert not nothing_ran([*skips, _result("lm-cpu1-single-fp32", Status.XFAILED)])
    assert not nothing_ran([])  # a shard the plan gave no cell: the split's emptiness, not the machine's


def test_a_run_of_cells_that_cannot_run_here_exits_5_unless_allowed(tmp_path: Path) -> None:
    matrix = str(write_matrix(tmp_path))
    report_dir = tmp_path / "r"
    refused = run_harness("run", "--matrix", matrix, "-k", "cuda", "--report-dir", str(report_dir))
    assert refused.returncode == EXIT_NOTHING_RAN, refused.stdout + refused.stderr
    assert "0 of 1 selected cell(s) could run here" in refused.stderr
    assert "needs 2 CUDA devices, found 0" in refused.stderr
    # The report is written all the same: what was skipped, and why.
    assert cells_by_id(report_dir)["regression-cuda2-ddp-fp32"]["status"] == "skipped"
    allowed = run_harness("run", "--matrix", matrix, "-k", "cuda", "--report-dir", str(report_dir),
                          "--overwrite", "--allow-empty")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
