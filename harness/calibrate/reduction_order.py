"""The plain reference run the way a cell's backend computes (each rank's share of a global batch
as its own micro-batch, their gradients averaged; this machine's kernels; the ranks' intra-op
thread count; in fp16/bf16 the backend's half precision: ZeRO-1's, ZeRO-2/3's or FSDP2's, from
harness.golden.half_weights; BatchNorm over the global batch where the task synchronises it; a
clipping task's norm as ZeRO or FSDP2 takes it over their shards, harness.golden.backend_clipping), and
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
# How each sharding strategy takes the gradient norm it clips by, in every precision
# (harness.golden.backend_clipping); single and DDP clip whole gradients, as the golden does.
CLIP_STYLES = {"zero1": "zero12", "zero2": "zero12", "zero3": "zero3", "fsdp": "fsdp"}


def reduction_order_perturbation(cell: Cell) -> Perturbation:
    """The cell's processes as the reference's splits, at the thread count its ranks run with; in
    half precision its backend's semantics; a synchronised task's BatchNorm over the global batch."""
    threads = int(launch_env(cell)["OMP_NUM_THREADS"])
    half = HALF_SEMANTICS.get(cell.strategy, "") if cell.precision != "fp32" else ""
    task = get_task(cell.task)
    synchronised = cell.processes > 1 and bool(getattr(task, "sync_batchnorm", False))
    clip = CLIP_STYLES.get(cell.strategy, "") if task.max_grad_norm is not None else ""
    parts = (f"splits_{cell.processes}", half, "sync_batchnorm" if synchronised else "",
             f"clip_{clip}" if clip else "")
    return Perturbation(splits=cell.processes, threads=threads, half_weights=half,
                        sync_batchnorm=synchronised, clip_style=clip, name="_".join(p for p in parts if p))


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
