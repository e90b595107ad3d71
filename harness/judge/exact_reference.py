"""The exact tier's comparison: an fp32 cell's record against the plain reference run the way the
cell's backend reduces (each rank's share of a global batch as its own micro-batch, their
gradients averaged; this machine's kernels; the ranks' intra-op thread count), value for value,
with no tolerance. Which cells are judged so is matrix.toml's [[exact_tier]], measured with
`python -m harness calibrate --exact-tier` (docs/calibration.md).

The reference is computed here, in the judging process, once per task x processes x threads per
run: the goldens are portable across CPUs and so not bit-exact on every one, while this
reference runs the same kernels as the ranks beside it.
"""

from __future__ import annotations

import threading

from harness.golden.reference import Perturbation, ReferenceInputs, train_reference
from harness.judge.outcome import Comparison
from harness.plan.cell import Cell
from harness.plan.exact_tier import QUANTITY
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


def exact_comparison(cell: Cell, record: Record, task_name: str) -> Comparison:
    differing = differing_quantities(record, reduction_order_reference(cell, task_name))
    if not differing:
        return Comparison(QUANTITY, True, 0.0, 0.0, 0.0, 0.0,
                          note="bit-identical to the reduction-order reference")
    worst_name, (elements, worst) = max(differing.items(), key=lambda item: item[1][1])
    note = (f"exact tier: {len(differing)} quantities differ from the plain reference run in this cell's "
            f"reduction order, first {next(iter(differing))}; largest {worst_name} ({elements} elements, "
            f"max |diff| {worst:.3g}); a correct backend reproduces this fp32 cell bit for bit "
            "(matrix.toml [[exact_tier]], docs/calibration.md)")
    return Comparison(QUANTITY, False, worst, 0.0, 0.0, 0.0, first_divergence=next(iter(differing)),
                      tolerance_used=float("inf"), note=note)
