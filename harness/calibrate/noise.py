"""Benign noise: how far each variant of the reference lands from the golden, as the atol it
would need at the rtol in force, per precision x family x kind of quantity (losses, eval, state_dict)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import torch

from harness.calibrate.child_reference import child_records
from harness.calibrate.variants import Variant, variants_for
from harness.golden.golden_store import load_golden
from harness.golden.reference import ReferenceInputs, train_reference
from harness.plan.tolerances import QUANTITY_KINDS, ToleranceTable
from harness.record.record_format import Record
from harness.tasks import get_task


@dataclass(frozen=True)
class Need:
    precision: str
    family: str
    kind: str  # QUANTITY_KINDS
    variant: str
    task: str
    atol: float  # the smallest atol that passes every element at the rtol in force
    rtol: float
    relative: float  # the worst |run - golden| / |golden| (the rtol that would pass with atol 0)
    where: str  # the quantity that needs it
    max_abs: float = 0.0  # the worst |run - golden| of the kind (the atol that would pass at rtol 0)
    max_abs_where: str = ""  # the quantity it was reached on
    # A variant run in a child process: the CPU capability its torch reported (e.g. "AVX2" under
    # the AVX2 caps); "" for one run in this process
    ran_with: str = ""


def quantities(record: Record, golden: Record) -> list[tuple[str, str, torch.Tensor, torch.Tensor]]:
    """(kind, name, run, golden) for every floating quantity both hold with the same shape."""
    pairs = [("losses", "losses", torch.tensor(record.losses), torch.tensor(golden.losses))]
    pairs += [("eval", f"eval/{k}", record.eval_outputs[k], golden.eval_outputs[k])
              for k in sorted(golden.eval_outputs) if k in record.eval_outputs]
    pairs += [("state_dict", f"state_dict/{k}", record.state_dict[k], golden.state_dict[k])
              for k in sorted(golden.state_dict) if k in record.state_dict]
    return [(kind, name, a, b) for kind, name, a, b in pairs
            if a.shape == b.shape and a.is_floating_point() and a.numel()]


def atol_needed(run: torch.Tensor, golden: torch.Tensor, rtol: float) -> float:
    a, b = run.double(), golden.double()
    return float(((a - b).abs() - rtol * b.abs()).clamp_min(0).max())


def relative_difference(run: torch.Tensor, golden: torch.Tensor) -> float:
    a, b = run.double(), golden.double()
    return float(((a - b).abs() / b.abs().clamp_min(1e-12)).max())


def measure(tasks: Iterable[str], precisions: Iterable[str], table: ToleranceTable) -> list[Need]:
    """One Need per task x precision x variant x family x kind: the worst element of that kind.
    The variants that need a child process (capped kernels) run there, every task x precision in
    one child per variant."""
    out: list[Need] = []
    in_child: dict[Variant, list[tuple[str, str]]] = {}
    for name in tasks:
        task = get_task(name)
        inputs = ReferenceInputs.of(task)
        model = task.build_model()
        for precision in precisions:
            golden = load_golden(name, precision)
            for variant in variants_for(precision, model):
                if variant.environment:
                    in_child.setdefault(variant, []).append((name, precision))
                    continue
                record = train_reference(task, precision, inputs=inputs, perturbation=variant.perturbation)
                out += _variant_needs(record, golden, table, precision, variant, name)
    for variant, pairs in in_child.items():
        ran = child_records(pairs, dict(variant.environment))
        for (name, precision, *_), record in ran.records.items():
            out += [replace(need, ran_with=ran.cpu_capability) for need in
                    _variant_needs(record, load_golden(name, precision), table, precision, variant, name)]
    return out


def _variant_needs(record: Record, golden: Record, table: ToleranceTable, precision: str, variant: Variant,
                   task: str) -> list[Need]:
    return [need for family in variant.families
            for need in _needs(record, golden, table, precision, family, variant.name, task)]


def _needs(record: Record, golden: Record, table: ToleranceTable, precision: str, family: str,
           variant: str, task: str) -> list[Need]:
    entry = table.entries[(precision, family)]
    worst: dict[str, Need] = {}
    absolute: dict[str, tuple[float, str]] = {}
    for kind, name, run, gold in quantities(record, golden):
        rtol = entry.for_quantity(kind).rtol
        need = Need(precision, family, kind, variant, task, atol_needed(run, gold, rtol), rtol,
                    relative_difference(run, gold), name)
        if kind not in worst or need.atol > worst[kind].atol:
            worst[kind] = need
        largest = atol_needed(run, gold, 0.0)
        if largest >= absolute.get(kind, (-1.0, ""))[0]:
            absolute[kind] = (largest, name)
    return [replace(worst[k], max_abs=absolute[k][0], max_abs_where=absolute[k][1])
            for k in QUANTITY_KINDS if k in worst]


def worst_by_entry(needs: Iterable[Need]) -> dict[tuple[str, str, str], Need]:
    """The largest need per (precision, family, kind), over tasks and variants."""
    worst: dict[tuple[str, str, str], Need] = {}
    for need in needs:
        key = (need.precision, need.family, need.kind)
        if key not in worst or need.atol > worst[key].atol:
            worst[key] = need
    return worst
