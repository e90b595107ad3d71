"""`python -m harness calibrate --write-weight-tolerances`: each task's own tolerances for the final
weights and the eval outputs of its half-precision cells, per family, from its measured noise,
written with the measurement beside them (the file matrix.toml's `[tolerances] weights_per_task`
names; the format and how cells use it: harness.plan.weight_tolerances).

Weights: atol = safety x the worst |weight - golden| of the family's variants, rtol 0 (a
master weight is an fp32 number). Eval outputs (half-precision values): atol = safety x the worst
atol the variants need at the family's eval rtol, plus the precision's regeneration tolerance (a
golden made on another CPU holds those half values rounded otherwise), at that rtol. Each atol
at least the fp32 plain atol. An entry may be wider than its family's tolerance (the family's is
then below the safety factor for that task, and the output says so). A task whose math depends
on how a batch is split other than through BatchNorm (dropout: each rank draws its own masks) gets
no entry: the variants that split do not apply to it, and the one left (this machine's kernels)
rounds no half-precision value differently here, so its noise on another CPU is not measured
(BatchNorm's is measured by two_ranks_sync_batchnorm: the multi-process cells that pass
synchronise it).
"""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import tomllib
import torch

from harness.atomic_files import write_text_atomic
from harness.calibrate.noise import Need
from harness.calibrate.variants import DEEPSPEED_HALF_VARIANTS, splits_change_the_math
from harness.golden.regeneration import regeneration_tolerance
from harness.plan.tolerances import ToleranceTable
from harness.plan.weight_tolerances import (
    ENTRY_FAMILIES,
    EVAL,
    HALF_PRECISIONS,
    TaskKey,
    WeightTolerance,
    parse_eval_tolerances,
    parse_weight_tolerances,
)
from harness.tasks import get_task

HEADER = """\
# Per-task tolerances for fp16/bf16 cells: the final weights ([<precision>.<task>]) and the
# gathered eval outputs ([eval.<precision>.<task>]) of the plain family (single, ddp, fsdp), and
# the same of the zero family (ZeRO-1/2/3: [zero.<precision>.<task>], [zero.eval.<precision>.<task>]),
# named by matrix.toml's [tolerances] weights_per_task and read by harness/plan/weight_tolerances.py.
# Written by `python -m harness calibrate --write-weight-tolerances`: do not edit by hand; rerun
# it after a task or its golden changes (--keep-wider merges another machine's measurement).
# Each entry: atol = safety_factor x need (the plain reference under the family's benign
# variants, docs/calibration.md), at least the family's fp32 atol; weights rtol 0, eval outputs
# the family's rtol. Tasks whose math depends on the batch split other than through BatchNorm
# (dropout) have no entry, nor, in the zero family, tasks the DeepSpeed half variants cannot run
# (batchnorm).
"""


@dataclass(frozen=True)
class Written:
    entries: list[WeightTolerance]
    skipped: list[str]  # "<family> <precision> <task>: why it has no entry"
    measured_on: tuple[str, ...] = ()  # the machines; empty: this one
    wider: tuple[str, ...] = ()  # entries wider than their family's atol, said so
    skipped_keys: frozenset[tuple[str, str, str, str]] = frozenset()  # (kind, family, precision, task)


def worst_weight_needs(needs: Iterable[Need]) -> dict[TaskKey, Need]:
    """(family, precision, task) -> the half-precision state_dict need with the largest |diff|."""
    return _worst(needs, "state_dict", lambda need: need.max_abs)


def worst_eval_needs(needs: Iterable[Need]) -> dict[TaskKey, Need]:
    """(family, precision, task) -> the half-precision eval need with the largest atol at the
    family's eval rtol (eval outputs are half values: the rtol covers a flipped last bit)."""
    return _worst(needs, EVAL, lambda need: need.atol)


def _worst(needs: Iterable[Need], kind: str, size: Callable[[Need], float]) -> dict[TaskKey, Need]:
    worst: dict[TaskKey, Need] = {}
    for need in needs:
        if need.family not in ENTRY_FAMILIES or need.kind != kind or need.precision not in HALF_PRECISIONS:
            continue
        key = (need.family, need.precision, need.task)
        if key not in worst or size(need) > size(worst[key]):
            worst[key] = need
    return worst


def below_noise(needs: Iterable[Need], table: ToleranceTable) -> list[str]:
    """The per-task tolerances in force that this machine's benign noise already exceeds: their
    cells would fail on rounding alone here (calibrate exits 1, as for a family entry)."""
    needs = list(needs)
    out = []
    for (family, precision, task), need in sorted(worst_weight_needs(needs).items()):
        entry = table.weights.get((family, precision, task))
        if entry is not None and need.max_abs > entry.atol:
            out.append(f"{family} {precision} {task}: weights moved {need.max_abs:.3g} under {need.variant} "
                       f"({need.max_abs_where}), above the atol {entry.atol:g} in force")
    for (family, precision, task), need in sorted(worst_eval_needs(needs).items()):
        entry = table.eval_outputs.get((family, precision, task))
        if entry is not None and need.atol > entry.atol:
            out.append(f"{family} {precision} {task}: eval outputs needed atol {need.atol:.3g} at rtol "
                       f"{need.rtol:g} under {need.variant} ({need.where}), above the atol {entry.atol:g} "
                       "in force")
    return out


def weight_tolerances(needs: Iterable[Need], table: ToleranceTable, safety: float) -> Written:
    """Per family, half precision and task: the final weights' entry (atol = safety x the worst
    |weight - golden|, rtol 0) and the eval outputs' entry (atol = safety x the worst atol need at
    the family's eval rtol + the precision's regeneration tolerance, that rtol), each at least the
    family's fp32 atol. An entry may be wider than its family's tolerance: that says the family's
    is below the safety factor for this task. A zero-family entry only for a task that a variant
    reproducing DeepSpeed's half precision ran (their weights start rounded to half: no other
    variant measures that)."""
    needs = list(needs)
    deepspeed_measured = {(n.family, n.precision, n.task) for n in needs
                          if n.variant in DEEPSPEED_HALF_VARIANTS}
    entries, skipped, wider = [], [], []
    skipped_keys: set[tuple[str, str, str, str]] = set()
    kinds: list[tuple[str, dict[TaskKey, Need], Callable[[Need], tuple[float, str]]]] = [
        ("state_dict", worst_weight_needs(needs), lambda n: (n.max_abs, n.max_abs_where)),
        (EVAL, worst_eval_needs(needs), lambda n: (n.atol, n.where))]
    for kind, worst, size in kinds:
        for (family, precision, task), need in sorted(worst.items()):
            why = _no_entry(family, precision, task, deepspeed_measured)
            if why:
                skipped_keys.add((kind, family, precision, task))
                skipped.append(f"{family} {precision} {task}: {why} ({_WHAT[kind]})")
                continue
            value, where = size(need)
            family_tolerance = table.entries[(precision, family)].for_quantity(kind)
            rtol = 0.0 if kind == "state_dict" else family_tolerance.rtol
            entry = _entry_for(kind, family, precision, task, value, need.variant, where, rtol, safety,
                               table.entries[("fp32", family)].atol)
            if entry.atol > family_tolerance.atol:
                wider.append(f"{family} {precision} {task} {_WHAT[kind]}: {entry.atol:.2g} where the "
                             f"family's atol is {family_tolerance.atol:g} ({entry.reason})")
            entries.append(entry)
    return Written(entries, skipped, wider=tuple(wider), skipped_keys=frozenset(skipped_keys))


def _no_entry(family: str, precision: str, task: str, deepspeed_measured: set[TaskKey]) -> str:
    """Why (family, precision, task) gets no entry; empty: it gets one."""
    # BatchNorm alone is measured by two_ranks_sync_batchnorm (its passing multi-process cells
    # synchronise it); any other split dependence (dropout draws) by no variant that splits.
    split = splits_change_the_math(get_task(task).build_model(), ignore_batchnorm=True)
    if split:
        return f"its math depends on the batch split ({split}); no variant measured its half-precision noise"
    if family == "zero" and (family, precision, task) not in deepspeed_measured:
        return ("no variant reproducing DeepSpeed's half precision ran it (its math depends on the batch "
                "split), so ZeRO's half-rounded weights were not measured")
    return ""


def _entry_for(kind: str, family: str, precision: str, task: str, need: float, variant: str, where: str,
               rtol: float, safety: float, floor: float) -> WeightTolerance:
    # An eval output is a half value that a golden made on another CPU holds rounded otherwise: a
    # cell must pass against any golden within the regeneration tolerance, so that bound is added
    # (weights are fp32 masters: the fp32 floor covers how far their regeneration moves them).
    moved = regeneration_tolerance(precision).atol if kind == EVAL else 0.0
    atol = two_digits_up(max(safety * need + moved, floor))
    reason = (f"{safety:g} x {_NEED[kind]} of the {family} variants, {need:.3g} ({variant}, {where})"
              + (f", + {moved:g}, how far a golden regenerated on another CPU may move "
                 "(matrix/golden/regeneration.toml)" if moved else ""))
    return WeightTolerance(precision, task, rtol, atol, need, variant, where, reason, kind, family)


_WHAT = {"state_dict": "final weights", EVAL: "eval outputs"}
_NEED = {"state_dict": "the worst |weight - golden|", EVAL: "the worst eval atol need at the family's rtol"}


def keep_wider_entries(written: Written, path: Path, safety: float, floors: dict[str, float]) -> Written:
    """`written` (this machine's) merged with the file at `path`: per kind, family, precision and
    task, the entry whose need is the larger, its atol recomputed at `safety`; the machines of both
    listed. An entry only the file has (a task this machine gave none) is kept; one this machine
    skipped stays skipped. `floors`: each family's fp32 atol."""
    earlier_file = tomllib.loads(path.read_text(encoding="utf-8"))
    matrix_file = path.parent / "matrix.toml"
    earlier = [*parse_weight_tolerances(matrix_file, path.name).values(),
               *parse_eval_tolerances(matrix_file, path.name).values()]
    merged = {(e.kind, *e.key): e for e in written.entries}
    for entry in earlier:
        key = (entry.kind, *entry.key)
        if key in written.skipped_keys:
            continue
        mine = merged.get(key)
        if mine is None or entry.need > mine.need:
            merged[key] = _entry_for(entry.kind, entry.family, entry.precision, entry.task, entry.need,
                                     entry.variant, entry.where, entry.rtol, safety, floors[entry.family])
    machines = [m.strip() for m in str(earlier_file.get("measured_on", "")).split(";") if m.strip()]
    here = machine_with_torch()
    return replace(written, entries=sorted(merged.values(), key=_file_order),
                   measured_on=tuple(dict.fromkeys([*machines, here])))


def _file_order(entry: WeightTolerance) -> tuple[bool, bool, str, str]:
    """The plain family's entries first, weights before eval, each by precision and task."""
    return entry.family != "plain", entry.kind != "state_dict", entry.precision, entry.task


def write_weight_tolerances(path: Path, written: Written, safety: float) -> None:
    def text(value: str) -> str:  # a TOML basic string (JSON's escapes are TOML's)
        return json.dumps(value)

    machines = "; ".join(written.measured_on or (machine_with_torch(),))
    lines = [HEADER, f"safety_factor = {safety:g}", f"measured_on = {text(machines)}", ""]
    ordered = sorted(written.entries, key=_file_order)
    for entry in ordered:
        lines += [f"[{entry.section}]", f"rtol = {entry.rtol:g}", f"atol = {entry.atol:.2g}",
                  f"need = {entry.need:.3g}", f"variant = {text(entry.variant)}",
                  f"where = {text(entry.where)}", f"reason = {text(entry.reason)}", ""]
    write_text_atomic(path, "\n".join(lines))


def two_digits_up(value: float) -> float:
    """`value` rounded up to two significant digits (a readable atol never below the measured one)."""
    if value <= 0:
        return 0.0
    exponent = math.floor(math.log10(value)) - 1
    digits = math.ceil(value / 10.0 ** exponent - 1e-9)
    return float(f"{digits}e{exponent}")  # parsed from decimal: 1e-05, never 9.999999999999999e-06


def machine_with_torch() -> str:
    return f"{_machine()}, torch {torch.__version__}"


def _machine() -> str:
    from accelerate_core.machine import cpu_model_and_flags

    model, _ = cpu_model_and_flags()
    return f"{model or platform.processor() or 'unknown CPU'}, {platform.machine()}"
