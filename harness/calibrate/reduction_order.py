"""The plain reference run the way a cell's backend reduces (each rank's share of a global batch
as its own micro-batch, their gradients averaged; this machine's kernels; the ranks' intra-op
thread count), and a record compared with it value for value: what `python -m harness calibrate
--exact-tier` measures (harness.calibrate.exact_tier, docs/calibration.md).

Computed once per task x processes x threads per process. Whether a cell reproduces it bit for
bit depends on more than the cell (docs/calibration.md: the measuring process's thread set-up
and the CPU's kernels move it), which is why no cell is judged by it.
"""

from __future__ import annotations

import threading

from harness.golden.reference import Perturbation, ReferenceInputs, train_reference
from harness.plan.cell import Cell
from harness.record.record_format import Record
from harness.run.torchrun_launch import launch_env
from harness.tasks import get_task

_references: dict[tuple[str, int, int], Record] = {}
_lock = threading.Lock()


def reduction_order_perturbation(cell: Cell) -> Perturbation:
    """The cell's processes as the reference's splits, at the thread count its ranks run with."""
    threads = int(launch_env(cell)["OMP_NUM_THREADS"])
    return Perturbation(splits=cell.processes, threads=threads, name=f"splits_{cell.processes}")


def reduction_order_reference(cell: Cell, task_name: str) -> Record:
    perturbation = reduction_order_perturbation(cell)
    key = (task_name, perturbation.splits, perturbation.threads)
    with _lock:
        if key not in _references:
            task = get_task(task_name)
            _references[key] = train_reference(task, "fp32", inputs=ReferenceInputs.of(task),
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
