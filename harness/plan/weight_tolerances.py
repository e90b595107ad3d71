"""Per-task tolerances for the final weights of half-precision cells of the plain family.

A single/DDP/FSDP cell in fp16 or bf16 steps fp32 master weights: its final state dict is fp32
numbers whose distance from the golden is the arithmetic noise of that task's half-precision
gradients, not a half dtype's rounding of the weights themselves. The family-wide tolerance
([tolerances.<precision>.plain], sized by the noisiest task: AdamW's classifier, FSDP's half
layers) lets a quiet task's weights move by whole percents (`sgd_accum` bf16: a 15% gradient error
passed). So `python -m harness calibrate --write-weight-tolerances` measures each task's own
benign noise (harness.calibrate: the plain reference under the variants of the plain family) and
writes, per precision and task, `atol` = safety factor x the worst |weight - golden| those
variants reached, never below the fp32 cells' own atol (a master weight is an fp32 number: it is
never required closer than an fp32 cell's), with `rtol = 0`. The measurement stays beside it.

matrix.toml names the file in `[tolerances] weights_per_task = "<file beside it>"`. A cell uses an
entry when its golden's task and precision have one and the cell is in the plain family. Every
other cell (the zero family: DeepSpeed keeps the module's weights in the half dtype; tasks
without an entry, users' tasks among them; fp32) keeps the family's tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from harness.errors import ToleranceError, explain
from harness.plan.cell import PRECISIONS

HALF_PRECISIONS = tuple(p for p in PRECISIONS if p != "fp32")
WRITE = "python -m harness calibrate --write-weight-tolerances"
FIELDS = ("rtol", "atol", "need", "variant", "where", "reason")


EVAL = "eval"  # the file's table of eval-output entries: [eval.<precision>.<task>]


@dataclass(frozen=True)
class WeightTolerance:
    """One task's own tolerance for one kind of quantity of its half-precision plain cells: the
    final weights ("state_dict", rtol 0) or the gathered eval outputs ("eval", the family's rtol)."""

    precision: str
    task: str  # the golden's task
    rtol: float
    atol: float
    need: float  # the worst distance of the benign variants: |weight - golden|, or eval's atol need
    variant: str  # the variant that reached it
    where: str  # the quantity it was reached on
    reason: str
    kind: str = "state_dict"  # or EVAL


def parse_weight_tolerances(matrix_file: Path, name: Any) -> dict[tuple[str, str], WeightTolerance]:
    """The weight entries of the file `[tolerances] weights_per_task` names, keyed (precision, task)."""
    path, table = _load(matrix_file, name)
    return _entries(path, {k: v for k, v in table.items() if k != EVAL}, "state_dict")


def parse_eval_tolerances(matrix_file: Path, name: Any) -> dict[tuple[str, str], WeightTolerance]:
    """The eval-output entries of that file ([eval.<precision>.<task>]), keyed (precision, task)."""
    path, table = _load(matrix_file, name)
    section = table.get(EVAL, {})
    if not isinstance(section, dict):
        raise ToleranceError(explain(f"{EVAL} in {path}", "not a table", "[eval.<precision>.<task>] sections",
                                     f"rewrite the file with `{WRITE}`"))
    return _entries(path, section, EVAL)


def _load(matrix_file: Path, name: Any) -> tuple[Path, dict[str, Any]]:
    where = f"[tolerances] weights_per_task in {matrix_file}"
    if not isinstance(name, str) or not name:
        raise ToleranceError(explain(where, f"{name!r} is not a file name", "a TOML file beside matrix.toml",
                                     "write weights_per_task = \"weight_tolerances.toml\""))
    path = matrix_file.parent / name
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ToleranceError(explain(f"{where}: {path}", "the file does not exist",
                                     f"a file written by `{WRITE}`",
                                     "write it with that command, or remove weights_per_task")) from None
    except tomllib.TOMLDecodeError as exc:
        raise ToleranceError(explain(str(path), f"not valid TOML ({exc})", "a TOML file",
                                     f"rewrite it with `{WRITE}`")) from None
    return path, table


def _entries(path: Path, table: dict[str, Any], kind: str) -> dict[tuple[str, str], WeightTolerance]:
    prefix = f"{EVAL}." if kind == EVAL else ""
    entries: dict[tuple[str, str], WeightTolerance] = {}
    for precision, tasks in table.items():
        if not isinstance(tasks, dict):
            continue  # the file's own header values (safety_factor, measured_on)
        if precision not in HALF_PRECISIONS:
            raise ToleranceError(explain(f"[{prefix}{precision}] in {path}", "not a half precision",
                                         HALF_PRECISIONS,
                                         "fp32 cells keep [tolerances.fp32.plain]; remove the section"))
        for task, body in tasks.items():
            entries[(precision, task)] = _entry(path, precision, task, body, kind)
    return entries


def _entry(path: Path, precision: str, task: str, body: Any, kind: str) -> WeightTolerance:
    where = f"[{f'{EVAL}.' if kind == EVAL else ''}{precision}.{task}] in {path}"
    if not isinstance(body, dict) or sorted(body) != sorted(FIELDS):
        got = sorted(body) if isinstance(body, dict) else type(body).__name__
        raise ToleranceError(explain(where, f"its keys are {got}", list(FIELDS),
                                     f"rewrite the file with `{WRITE}`"))
    try:
        rtol, atol, need = float(body["rtol"]), float(body["atol"]), float(body["need"])
    except (TypeError, ValueError):
        raise ToleranceError(explain(where, "rtol, atol or need is not a number", "numbers >= 0",
                                     "fix the entry")) from None
    if min(rtol, atol, need) < 0 or atol < need:
        raise ToleranceError(explain(where, f"rtol {rtol:g}, atol {atol:g}, need {need:g}",
                                     "numbers >= 0 with atol >= need (the tolerance covers its noise)",
                                     "fix the entry"))
    return WeightTolerance(precision, task, rtol, atol, need, str(body["variant"]), str(body["where"]),
                           str(body["reason"]), kind)
