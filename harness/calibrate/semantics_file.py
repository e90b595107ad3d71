"""Writing the own-semantics check's tolerances (the file matrix.toml's `[tolerances]
semantics_per_task` names; format and use: harness.plan.semantics_tolerances) from their measured
noise (harness.calibrate.semantics_noise), and saying where the noise exceeds those in force.

Each entry: atol = safety x the worst |weight - reference| of the variations, at least the fp32
atol of the cell's family, rtol 0.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import tomllib

from harness.atomic_files import write_text_atomic
from harness.calibrate.semantics_noise import SemanticsNeed, SemanticsScope
from harness.calibrate.weights_file import machine_with_torch, two_digits_up
from harness.plan.semantics_tolerances import SemanticsTolerance, parse_semantics_tolerances
from harness.plan.tolerances import ToleranceTable

HEADER = """\
# Per-task tolerances of the own-semantics check: how far the final weights of a half-precision
# CPU cell may lie from the plain reference computed as its backend computes (its ranks' split,
# their threads, its backend's own half precision), on the judging machine. Sections are
# [<precision>.<task>.<semantics>]; named by matrix.toml's [tolerances] semantics_per_task and read
# by harness/plan/semantics_tolerances.py. Written by `python -m harness calibrate
# --write-weight-tolerances`: do not edit by hand; rerun it after a task or a backend's semantics
# change (--keep-wider merges another machine's measurement). Each entry: atol = safety_factor x
# need (the worst |weight - reference| under twice the threads, exact accumulation of every half
# GEMM, and kernels capped at AVX2), at least the family's fp32 atol; rtol 0.
"""


def semantics_tolerances(needs: Iterable[SemanticsNeed], scopes: Iterable[SemanticsScope],
                         safety: float) -> list[SemanticsTolerance]:
    floors = {scope.key: scope.floor for scope in scopes}
    return [_entry(need.key, need.need, need.variant, need.where, safety, floors[need.key]) for need in needs]


def _entry(key: tuple[str, str, str], need: float, variant: str, where: str, safety: float,
           floor: float) -> SemanticsTolerance:
    precision, task, semantics = key
    atol = two_digits_up(max(safety * need, floor))
    if need > 0:
        larger = f"; the fp32 atol {floor:g} is larger" if floor > safety * need else ""
        reason = (f"{safety:g} x the worst |weight - reference| of the variations, {need:.3g} ({variant}, "
                  f"state_dict/{where}){larger}")
    else:
        reason = f"no variation moved a bit of the reference here: the fp32 atol {floor:g}, the floor"
    return SemanticsTolerance(precision, task, semantics, 0.0, atol, need, variant, where, reason)


def keep_wider(entries: list[SemanticsTolerance], path: Path, scopes: Iterable[SemanticsScope],
               safety: float) -> tuple[list[SemanticsTolerance], tuple[str, ...]]:
    """`entries` merged with the file at `path`: per key, the larger need, its atol recomputed;
    an entry only the file has is kept. Also the machines both were measured on."""
    floors = {scope.key: scope.floor for scope in scopes}
    merged = {e.key: e for e in entries}
    earlier = parse_semantics_tolerances(path.parent / "matrix.toml", path.name)
    for key, entry in earlier.items():
        mine = merged.get(key)
        if key not in floors:  # no cell of this matrix is judged by it here: kept as measured there
            merged.setdefault(key, entry)
        elif mine is None or entry.need > mine.need:
            merged[key] = _entry(key, entry.need, entry.variant, entry.where, safety, floors[key])
    text = tomllib.loads(path.read_text(encoding="utf-8")).get("measured_on", "")
    machines = [m.strip() for m in str(text).split(";") if m.strip()]
    machines.append(machine_with_torch())
    return sorted(merged.values(), key=lambda e: e.key), tuple(dict.fromkeys(machines))


def write_semantics_tolerances(path: Path, entries: Iterable[SemanticsTolerance], safety: float,
                               measured_on: tuple[str, ...] = ()) -> None:
    lines = [HEADER, f"safety_factor = {safety:g}",
             f"measured_on = {json.dumps('; '.join(measured_on or (machine_with_torch(),)))}", ""]
    for entry in sorted(entries, key=lambda e: e.key):
        lines += [f"[{entry.section}]", f"rtol = {entry.rtol:g}", f"atol = {entry.atol:.2g}",
                  f"need = {entry.need:.3g}", f"variant = {json.dumps(entry.variant)}",
                  f"where = {json.dumps(entry.where)}", f"reason = {json.dumps(entry.reason)}", ""]
    write_text_atomic(path, "\n".join(lines))


def semantics_below_noise(needs: Iterable[SemanticsNeed], table: ToleranceTable) -> list[str]:
    """The check's tolerances in force that this machine's variations already exceed."""
    out = []
    for need in needs:
        entry = table.semantics.get(need.key)
        if entry is not None and need.need > entry.atol:
            out.append(f"semantics {' '.join(need.key)}: weights moved {need.need:.3g} under {need.variant} "
                       f"(state_dict/{need.where}), above the atol {entry.atol:g} in force")
    return out
