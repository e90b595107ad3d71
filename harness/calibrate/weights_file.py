"""`python -m harness calibrate --write-weight-tolerances`: each task's own tolerance for the final
weights of its half-precision plain-family cells, from its measured noise, written with the
measurement beside it (the file matrix.toml's `[tolerances] weights_per_task` names; the format
and how cells use it: harness.plan.weight_tolerances).

atol = safety x the worst |weight - golden| of the plain family's variants, never below the fp32
plain atol (a master weight is an fp32 number), rtol 0. Two kinds of task get no entry:
- one whose math depends on how a batch is split (BatchNorm, dropout): the variants that split
  do not apply to it, and the one left (this machine's kernels) rounds no half-precision value
  differently here, so its noise on another CPU, where kernels round otherwise, is not measured;
- one whose entry would not be tighter than its family's state_dict atol (the family's is then
  the sharper tolerance).
"""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.atomic_files import write_text_atomic
from harness.calibrate.noise import Need
from harness.calibrate.variants import splits_change_the_math
from harness.plan.tolerances import ToleranceTable
from harness.plan.weight_tolerances import HALF_PRECISIONS, WeightTolerance
from harness.tasks import get_task

HEADER = """\
# Per-task tolerances for the final weights of fp16/bf16 cells of the plain family
# (single, ddp, fsdp), named by matrix.toml's [tolerances] weights_per_task and read by
# harness/plan/weight_tolerances.py. Written by `python -m harness calibrate
# --write-weight-tolerances`: do not edit by hand; rerun it after a task or its golden changes.
# Each entry: atol = safety_factor x need (the worst |weight - golden| of the plain reference
# under the plain family's benign variants, docs/calibration.md), at least the fp32 plain atol;
# rtol 0. Tasks whose math depends on the batch split (BatchNorm, dropout) have no entry.
"""


@dataclass(frozen=True)
class Written:
    entries: list[WeightTolerance]
    skipped: list[str]  # "<precision> <task>: why it has no entry"


def worst_weight_needs(needs: Iterable[Need]) -> dict[tuple[str, str], Need]:
    """(precision, task) -> the plain-family half-precision state_dict need with the largest |diff|."""
    worst: dict[tuple[str, str], Need] = {}
    for need in needs:
        if need.family != "plain" or need.kind != "state_dict" or need.precision not in HALF_PRECISIONS:
            continue
        key = (need.precision, need.task)
        if key not in worst or need.max_abs > worst[key].max_abs:
            worst[key] = need
    return worst


def below_noise(needs: Iterable[Need], table: ToleranceTable) -> list[str]:
    """The weight tolerances in force that this machine's benign noise already exceeds: their
    cells would fail on rounding alone here (calibrate exits 1, as for a family entry)."""
    out = []
    for (precision, task), need in sorted(worst_weight_needs(needs).items()):
        entry = table.weights.get((precision, task))
        if entry is not None and need.max_abs > entry.atol:
            out.append(f"{precision} {task}: weights moved {need.max_abs:.3g} under {need.variant} "
                       f"({need.max_abs_where}), above the atol {entry.atol:g} in force")
    return out


def weight_tolerances(needs: Iterable[Need], table: ToleranceTable, safety: float) -> Written:
    worst = worst_weight_needs(needs)
    floor = table.entries[("fp32", "plain")].atol
    entries, skipped = [], []
    for (precision, task), need in sorted(worst.items()):
        atol = _two_digits_up(max(safety * need.max_abs, floor))
        family_atol = table.entries[(precision, "plain")].for_quantity("state_dict").atol
        split = splits_change_the_math(get_task(task).build_model())
        if split:
            skipped.append(f"{precision} {task}: its math depends on the batch split ({split}); no "
                           "variant measured its half-precision noise")
            continue
        if atol >= family_atol:
            skipped.append(f"{precision} {task}: {atol:.2g} would not be tighter than the family's "
                           f"{family_atol:g}")
            continue
        reason = (f"{safety:g} x the worst |weight - golden| of the plain variants, {need.max_abs:.3g} "
                  f"({need.variant}, {need.max_abs_where})")
        entries.append(WeightTolerance(precision, task, 0.0, atol, need.max_abs, need.variant,
                                       need.max_abs_where, reason))
    return Written(entries, skipped)


def write_weight_tolerances(path: Path, written: Written, safety: float) -> None:
    def text(value: str) -> str:  # a TOML basic string (JSON's escapes are TOML's)
        return json.dumps(value)

    lines = [HEADER, f"safety_factor = {safety:g}",
             f"measured_on = {text(f'{_machine()}, torch {torch.__version__}')}", ""]
    for entry in written.entries:
        lines += [f"[{entry.precision}.{entry.task}]", f"rtol = {entry.rtol:g}", f"atol = {entry.atol:.2g}",
                  f"need = {entry.need:.3g}", f"variant = {text(entry.variant)}",
                  f"where = {text(entry.where)}", f"reason = {text(entry.reason)}", ""]
    write_text_atomic(path, "\n".join(lines))


def _two_digits_up(value: float) -> float:
    """`value` rounded up to two significant digits (a readable atol never below the measured one)."""
    if value <= 0:
        return 0.0
    exponent = math.floor(math.log10(value)) - 1
    digits = math.ceil(value / 10.0 ** exponent - 1e-9)
    return float(f"{digits}e{exponent}")  # parsed from decimal: 1e-05, never 9.999999999999999e-06


def _machine() -> str:
    from accelerate_core.machine import cpu_model_and_flags

    model, _ = cpu_model_and_flags()
    return f"{model or platform.processor() or 'unknown CPU'}, {platform.machine()}"
