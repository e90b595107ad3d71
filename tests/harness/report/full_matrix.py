"""A synthetic result list the size of the real matrix, as `nox -s matrix` leaves it on a CPU-only
machine: 10 tasks x 39 configurations (390 cells), the 240 CUDA cells skipped with the reasons
harness/plan/availability.py gives, the CPU cells passed (or xfailed as matrix.toml declares for
plain BatchNorm and dropout on 2 processes), one passed cell at 95% of its tolerance. With
`compare_records`, the deepspeed environment's run against nodeepspeed: every non-DeepSpeed
cell bit-identical, every ZeRO cell not compared (nodeepspeed cannot run it).

Built from cell ids, not from matrix/matrix.toml, so the report tests do not move with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.judge.outcome import CellResult, Comparison, Status
from harness.plan.availability import Host, check
from harness.plan.cell import Cell
from harness.plan.tolerances import Tolerance

TASKS = ("regression", "classifier", "lm", "scalar", "root_param", "sgd_accum", "clip_norm",
         "batchnorm", "batchnorm_sync", "dropout")
SHAPES = ("cpu1-single", "cpu2-ddp", "cpu2-zero1", "cpu2-zero2", "cpu2-zero3", "cuda1-single",
          "cuda1-zero1", "cuda1-zero2", "cuda1-zero3", "cuda2-ddp", "cuda2-zero1", "cuda2-zero2",
          "cuda2-zero3")
PRECISIONS = ("fp32", "fp16", "bf16")
NEAR_MISS = "batchnorm_sync-cpu2-ddp-bf16"  # the one the issue found at 95% of its tolerance
NEAR_MISS_SHARE = 0.95
CPU_HOST = Host(cuda_devices=0, cpu_cores=2, deepspeed=True, cpu_native_fp16=False)
NO_DEEPSPEED_HOST = Host(cuda_devices=0, cpu_cores=2, deepspeed=False, cpu_native_fp16=False)
ENVIRONMENT: dict[str, Any] = {
    "name": "deepspeed", "python": "3.11.7", "torch": "2.13.0+cpu", "deepspeed": "0.19.8",
    "platform": "Linux-6.1.0-28-cloud-amd64-x86_64-with-glibc2.36", "cpu_count": 2,
    "cuda_device_count": 0, "cuda_devices": [],
}  # fmt: skip


def cell_ids() -> list[str]:
    """Task-major, as the matrix file orders them."""
    return [f"{t}-{s}-{p}" for t in TASKS for s in SHAPES for p in PRECISIONS]


def _comparisons(index: int, share: float) -> list[Comparison]:
    return [
        Comparison("losses", True, 1e-6, 1e-6, 1e-5, 1.6e-2, tolerance_used=share),
        Comparison("lrs", True, 0.0, 0.0, 1e-5, 1.6e-2, tolerance_used=0.0),
        Comparison("state_dict/net.0.weight", True, 1e-7, 1e-7, 1e-5, 1.6e-2,
                   tolerance_used=share * (index % 3) / 4),
    ]


def _record_change(cell: Cell, other: Path) -> dict[str, Any]:
    if not cell.is_deepspeed:
        return {"against": "nodeepspeed", "change": "bit-identical", "max_abs_diff": 0.0,
                "first_difference": None, "tensors": 7, "changed_tensors": 0}
    from harness.judge.version_diff import record_change

    # The real entry for a record the other environment never wrote (record is not read then).
    tolerance = Tolerance(cell.precision, "deepspeed", rtol=1e-3, atol=1e-5, reason="synthetic")
    return record_change(None, other / cell.id, tolerance, "nodeepspeed")  # type: ignore[arg-type]


def full_matrix(host: Host = CPU_HOST, compare_records: Path | None = None,
                environment: str = "deepspeed") -> list[CellResult]:
    results = []
    for index, cell_id in enumerate(cell_ids()):
        cell = Cell.from_id(cell_id)
        available = check(cell, host)
        extra: dict[str, Any] = {}
        if not available.runnable:
            results.append(CellResult(cell, Status.SKIPPED, available.reason, environment=environment))
            continue
        if compare_records is not None:
            extra["record_change"] = _record_change(cell, compare_records)
        if cell.task in ("batchnorm", "dropout") and cell.processes == 2:
            results.append(CellResult(cell, Status.XFAILED, "declared: per-process statistics differ",
                                      duration_s=0.6, emulated=available.emulated, environment=environment,
                                      extra=extra))
            continue
        share = NEAR_MISS_SHARE if cell_id == NEAR_MISS else (index * 37 % 60) / 100
        results.append(CellResult(cell, Status.PASSED, duration_s=0.4, comparisons=_comparisons(index, share),
                                  emulated=available.emulated, environment=environment, extra=extra))
    return results
