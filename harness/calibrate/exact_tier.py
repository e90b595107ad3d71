"""The exact tier, measured: which CPU cells of a run a reference that follows their backend's
reduction order (and, in fp16/bf16, its half precision) reproduces bit for bit (docs/calibration.md).

The reference follows a cell the way the cell's process computes: this machine's kernels
(oneDNN on, one intra-op thread, as a rank runs), and for a cell of N processes each global batch
as N micro-batches whose gradients are computed apart and averaged (the `two_ranks` variant for
N = 2: DDP's all-reduce of each rank's gradient divided by the world size gives the same bits as
averaging the halves, since dividing by 2 is exact); in half precision the backend's own semantics
(ZeRO-1, ZeRO-2/3 or FSDP2: harness.golden.half_weights; single and DDP autocast as the golden);
a task that synchronises BatchNorm, over the global batch. Where every quantity of a cell (losses,
lrs, loss scales, eval outputs, the state dict) equals that reference's, the cell can be judged
exactly on top of its tolerance: a bug of any size shows. Measured, not judged: the share of
exact cells moves with the measuring process's thread set-up and the CPU (docs/calibration.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.calibrate.reduction_order import (
    differing_quantities,
    reduction_order_perturbation,
    reduction_order_reference,
)
from harness.calibrate.variants import splits_change_the_math
from harness.golden.global_rng import GLOBAL_RNG_LOCK
from harness.judge.cell_verdict import golden_task_of
from harness.layout.report_dir import ReportDir
from harness.plan.cell import Cell
from harness.record.record_format import Record
from harness.tasks import get_task


@dataclass
class ExactCheck:
    cell_id: str
    exact: bool
    # quantity -> (elements that differ, max |diff|), for the quantities that are not bit-identical
    differing: dict[str, tuple[int, float]] = field(default_factory=dict)
    why_not_checked: str = ""

    @property
    def checked(self) -> bool:
        return not self.why_not_checked


def check_exact(report_dir: Path) -> list[ExactCheck]:
    """Every CPU cell that passed in `report_dir`, against its reduction-order reference."""
    folder = ReportDir(report_dir)
    report = json.loads(folder.report_json.read_text(encoding="utf-8"))
    out = []
    for entry in report["cells"]:
        if entry["status"] != "passed" or ":" in entry["id"]:  # resume pairs have their own exactness
            continue
        cell = Cell.from_id(entry["id"])
        if cell.device != "cpu":
            continue
        task_name = golden_task_of(cell.task)
        why = not_modelled(cell, task_name)
        if why:
            out.append(ExactCheck(cell.id, False, why_not_checked=f"not modelled: {why}"))
            continue
        differing = differing_quantities(Record.load(folder.record(cell.id)),
                                         reduction_order_reference(cell, task_name))
        out.append(ExactCheck(cell.id, not differing, differing))
    return out


def not_modelled(cell: Cell, task_name: str) -> str:
    """Why no reference follows this cell's computation; empty: one does."""
    if cell.processes == 1:
        return ""
    perturbation = reduction_order_perturbation(cell)
    # Under the process's RNG lock: building a model seeds torch's global RNG, and under `run
    # --exact` this runs in a judging thread beside others that hash a task's initial weights.
    with GLOBAL_RNG_LOCK:
        model = get_task(task_name).build_model()
    split = splits_change_the_math(model, ignore_batchnorm=perturbation.sync_batchnorm)
    if split:
        return split
    if perturbation.sync_batchnorm and perturbation.half_weights:
        return f"synchronised BatchNorm under {cell.strategy}'s half precision"
    return ""


def exact_lines(checks: list[ExactCheck], report_dir: Path) -> list[str]:
    checked = [c for c in checks if c.checked]
    exact = [c for c in checked if c.exact]
    by_precision = ", ".join(
        f"{p} {sum(c.exact for c in of)} of {len(of)}"
        for p in ("fp32", "fp16", "bf16") if (of := [c for c in checked if _precision(c) == p]))
    lines = [f"exact tier ({report_dir}): {len(exact)} of {len(checked)} cells bit-identical to their "
             f"reduction-order reference ({by_precision}; {len(checks) - len(checked)} not modelled)"]
    for check in checks:
        if not check.checked:
            lines.append(f"  {check.cell_id}: {check.why_not_checked}")
        elif check.exact:
            lines.append(f"  {check.cell_id}: exact")
        else:
            worst = max(check.differing.items(), key=lambda item: item[1][1])
            lines.append(f"  {check.cell_id}: {len(check.differing)} quantities differ; largest "
                         f"{worst[0]} ({worst[1][0]} elements, max |diff| {worst[1][1]:.2e})")
    return lines


def _precision(check: ExactCheck) -> str:
    return Cell.from_id(check.cell_id).precision


def exact_json(checks: list[ExactCheck]) -> list[dict[str, object]]:
    return [{"cell": c.cell_id, "exact": c.exact, "why_not_checked": c.why_not_checked,
             "differing": {k: {"elements": n, "max_abs_diff": d} for k, (n, d) in c.differing.items()}}
            for c in checks]

