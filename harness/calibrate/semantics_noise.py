"""The benign noise of the own-semantics reference (harness.calibrate.semantics_judge): how far the
reference that computes as a cell's backend computes moves, in its final weights, under what may
legitimately change its bits between the cell's ranks and the judging process.

- `threads_x2`: twice the ranks' intra-op threads (a threaded reduction sums in another order);
- `exact_accumulation`: every half GEMM accumulated exactly and rounded once
  (harness.golden.exact_accumulation): the bound on what another kernel's accumulation order
  changes, measured on this CPU for every CPU;
- `avx2_kernels`: the reference in a child process with torch, oneDNN and MKL capped at AVX2
  (harness.calibrate.child_reference): other kernels where this CPU has AVX-512.

One measurement per task x precision x semantics of the matrix's half-precision CPU cells that the
reference reproduces (the exact tier's, harness.calibrate.exact_judge.why_not_in_tier).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace

from harness.calibrate.child_reference import AVX2_KERNELS, child_records
from harness.calibrate.exact_judge import why_not_in_tier
from harness.calibrate.reduction_order import reduction_order_perturbation, reduction_order_reference
from harness.golden.reference import Perturbation, ReferenceInputs, train_reference
from harness.judge.cell_verdict import golden_task_of
from harness.plan.cell import Cell, ResumeCell
from harness.plan.matrix import Matrix
from harness.plan.semantics_tolerances import SemanticsKey
from harness.plan.tolerances import FAMILIES
from harness.record.record_format import Record
from harness.tasks import get_task

HALF = ("fp16", "bf16")
AVX2_VARIANT = "avx2_kernels"


@dataclass(frozen=True)
class SemanticsScope:
    """One reference the check judges cells by: its key, how it runs, and its floor."""

    key: SemanticsKey  # (precision, golden task, semantics name)
    base: Perturbation  # the reduction-order perturbation of its cells
    floor: float  # the fp32 atol of its cells' family: a master weight is never required closer
    cells: tuple[str, ...]  # the ids of the cells it judges


@dataclass(frozen=True)
class SemanticsNeed:
    key: SemanticsKey
    need: float  # the worst |weight - reference| over the variations
    variant: str  # the variation that reached it ("" when none moved a bit)
    where: str  # the state-dict key it was reached on
    ran_with: str = ""  # for the child's variation: the CPU capability its torch reported


def semantics_scope(matrix: Matrix) -> list[SemanticsScope]:
    """Every task x precision x semantics the check judges the matrix's cells by."""
    found: dict[SemanticsKey, tuple[Perturbation, float, list[str]]] = {}
    for cell in matrix.all_cells():
        if isinstance(cell, ResumeCell) or cell.precision not in HALF or why_not_in_tier(cell):
            continue
        base = reduction_order_perturbation(cell)
        key = (cell.precision, golden_task_of(cell.task), base.name)
        floor = matrix.tolerances.entries[("fp32", FAMILIES[cell.strategy])].atol
        found.setdefault(key, (base, floor, []))[2].append(cell.id)
    return [SemanticsScope(key, base, floor, tuple(ids)) for key, (base, floor, ids) in sorted(found.items())]


def variations(base: Perturbation) -> list[Perturbation]:
    """The in-process benign variations of a reference (the kernel cap runs in a child)."""
    return [replace(base, threads=2 * base.threads, name="threads_x2"),
            replace(base, exact_accumulation=True, name="exact_accumulation")]


def measure_semantics(scopes: Iterable[SemanticsScope]) -> list[SemanticsNeed]:
    scopes = list(scopes)
    if not scopes:
        return []
    bases: dict[SemanticsKey, Record] = {}
    moved: dict[SemanticsKey, list[tuple[float, str, str, str]]] = {}  # (|diff|, variant, where, ran_with)
    for scope in scopes:
        precision, task_name, _ = scope.key
        task = get_task(task_name)
        inputs = ReferenceInputs.of(task)
        bases[scope.key] = train_reference(task, precision, inputs=inputs, perturbation=scope.base)
        for variation in variations(scope.base):
            record = train_reference(task, precision, inputs=inputs, perturbation=variation)
            size, where = largest_move(record, bases[scope.key])
            moved.setdefault(scope.key, []).append((size, variation.name, where, ""))
    requests = {scope.key: (scope.key[1], scope.key[0], scope.base) for scope in scopes}
    ran = child_records(requests.values(), dict(AVX2_KERNELS))
    for key, request in requests.items():
        size, where = largest_move(ran.records[request], bases[key])
        moved[key].append((size, AVX2_VARIANT, where, ran.cpu_capability))
    out = []
    for scope in scopes:
        size, variant, where, ran_with = max(moved[scope.key], key=lambda m: m[0])
        out.append(SemanticsNeed(scope.key, size, variant if size > 0 else "", where if size > 0 else "",
                                 ran_with))
    return out


def largest_move(record: Record, base: Record) -> tuple[float, str]:
    """(the largest |weight - base| over the floating state dict, the key it is at)."""
    worst, where = 0.0, ""
    for name, expected in base.state_dict.items():
        got = record.state_dict.get(name)
        if got is None or not expected.is_floating_point() or got.shape != expected.shape:
            continue
        size = float((got.double() - expected.double()).abs().max()) if expected.numel() else 0.0
        if size > worst:
            worst, where = size, name
    return worst, where


_here: dict[tuple[str, str, Perturbation], tuple[float, str, str]] = {}
_lock = threading.Lock()


def variation_here(cell: Cell, task_name: str) -> tuple[float, str, str]:
    """The cell's own-semantics reference's largest move under the in-process variations, measured
    on the judging machine now: (|weight - reference|, the variation, the state-dict key). The
    judge never applies a tolerance below what this machine's own noise needs, whatever the
    calibration file says (it may have been measured on another CPU). Cached per reference."""
    base = reduction_order_perturbation(cell)
    key = (task_name, cell.precision, base)
    with _lock:
        if key not in _here:
            reference = reduction_order_reference(cell, task_name)
            task = get_task(task_name)
            inputs = ReferenceInputs.of(task)
            moves = []
            for variation in variations(base):
                record = train_reference(task, cell.precision, inputs=inputs, perturbation=variation)
                size, where = largest_move(record, reference)
                moves.append((size, variation.name, where))
            _here[key] = max(moves, key=lambda m: m[0])
        return _here[key]
