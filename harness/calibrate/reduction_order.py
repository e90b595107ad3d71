"""The plain reference run the way a cell's backend computes (each rank's share of a global batch
as its own micro-batch, their gradients averaged; this machine's kernels; the ranks' intra-op
thread count; in fp16/bf16 the backend's half precision: ZeRO-1's, ZeRO-2/3's or FSDP2's, from
harness.golden.half_weights; BatchNorm over the global batch where the task synchronises it), and
a record compared with it value for value: what `python -m harness calibrate --exact-tier`
measures (harness.calibrate.exact_tier, docs/calibration.md).

Computed once per task x precision x perturbation. Every run judges the final weights of a
half-precision cell by it, at a tolerance measured from its own benign variation
(harness.calibrate.semantics_judge); `run --exact` judges every quantity of a cell of the exact
tier by it, bit for bit (harness.calibrate.exact_judge).
"""

from __future__ import annotations

import threading

from harness.golden.reference import Perturbation, ReferenceInputs, train_reference
from harness.plan.cell import Cell
from harness.record.record_format import Record
from harness.run.torchrun_launch import launch_env
from harness.tasks import get_task

_references: dict[tuple[str, str, Perturbation], Record] = {}
_lock = threading.Lock()

# The half precision each strategy's cells compute in (harness.golden.half_weights); the others
# (single, DDP) autocast over fp32 weights, as the golden's loop does.
HALF_SEMANTICS = {"zero1": "zero1", "zero2": "zero2", "zero3": "zero2", "fsdp": "fsdp"}


def reduction_order_perturbation(cell: Cell) -> Perturbation:
    """The cell's processes as the reference's splits, at the thread count its ranks run with; in
    half precision its backend's semantics; a synchronised task's BatchNorm over the global batch."""
    threads = int(launch_env(cell)["OMP_NUM_THREADS"])
    half = HALF_SEMANTICS.get(cell.strategy, "") if cell.precision != "fp32" else ""
    synchronised = cell.processes > 1 and bool(getattr(get_task(cell.task), "sync_batchnorm", False))
    parts = (f"splits_{cell.processes}", half, "sync_batchnorm" if synchronised else "")
    return Perturbation(splits=cell.processes, threads=threads, half_weights=half,
                        sync_batchnorm=synchronised, name="_".join(p for p in parts if p))


def reduction_order_reference(cell: Cell, task_name: str) -> Record:
    perturbation = reduction_order_perturbation(cell)
    key = (task_name, cell.precision, perturbation)
    with _lock:
        if key not in _references:
            task = get_task(task_name)
            _references[key] = train_reference(task, cell.precision, inputs=ReferenceInputs.of(task),
                                               perturbation=perturbation)
        return _references[key]


def differing_quantities(record: Record, reference: Record) -> dict[str, tuple[int, float]]:
    """Every quantity of the reference the record does not hold value for value: name -> (how many
    elements differ, the largest |difference|); a missing one or another dtype or shape counts
    all its elements."""
    mine = record.tensors()
    out: dict[str, tuple[int, float]] = {}
    for name, expected in reference.tensors().items():
        got = mine.get(name)
        if got is None or got.dtype != expected.dtype or got.shape != expected.shape:
            out[name] = (expected.numel(), float("inf"))
            continue
        unequal = got.reshape(-1) != expected.reshape(-1)  # NaN never equals; -0.0 equals 0.0
        if bool(unequal.any()):
            out[name] = (int(unequal.sum()), float((got.double() - expected.double()).abs().max()))
    return out
