"""Per-task tolerances for the final weights and eval outputs of half-precision cells.

A single/DDP/FSDP cell in fp16 or bf16 steps fp32 master weights: its final state dict is fp32
numbers whose distance from the golden is the arithmetic noise of that task's half-precision
gradients, not a half dtype's rounding of the weights themselves. The family-wide tolerance
([tolerances.<precision>.plain], sized by the noisiest task: AdamW's classifier, FSDP's half
layers) lets a quiet task's weights move by whole percents (`sgd_accum` bf16: a 15% gradient error
passed). So `python -m harness calibrate --write-weight-tolerances` measures each task's own
benign noise (harness.calibrate: the plain reference under the variants of the family) and
writes, per precision and task, `atol` = safety factor x the worst |weight - golden| those
variants reached, never below the fp32 cells' own atol (a master weight is an fp32 number: it is
never required closer than an fp32 cell's), with `rtol = 0`; eval outputs likewise (their own
rule: harness.calibrate.weights_file). The measurement stays beside it.

The zero family (ZeRO-1/2/3) has entries of its own ([zero.<precision>.<task>],
[zero.eval.<precision>.<task>]), measured by the variants that reproduce DeepSpeed's half
precision (masters copied from the half weights, gradients reduced and accumulated as each stage
does: harness.golden.half_weights), and only for the tasks those variants could run.

matrix.toml names the file in `[tolerances] weights_per_task = "<file beside it>"`. A cell uses an
entry when its family, its golden's task and its precision have one. Every other cell (tasks
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
# The families with entries; the plain family's sections sit at the top of the file, the others'
# under their name ([zero.<precision>.<task>], [zero.eval.<precision>.<task>]).
ENTRY_FAMILIES = ("plain", "zero")
# (family, precision, golden task): the key of every per-task entry of one kind
TaskKey = tuple[str, str, str]


@dataclass(frozen=True)
class WeightTolerance:
    """One task's own tolerance for one kind of quantity of its half-precision cells of one family:
    the final weights ("state_dict", rtol 0) or the gathered eval outputs ("eval", the family's rtol)."""

    precision: str
    task: str  # the golden's task
    rtol: float
    atol: float
    need: float  # the worst distance of the benign variants: |weight - golden|, or eval's atol need
    variant: str  # the variant that reached it
    where: str  # the quantity it was reached on
    reason: str
    kind: str = "state_dict"  # or EVAL
    family: str = "plain"  # or "zero"

    @property
    def key(self) -> TaskKey:
        return self.family, self.precision, self.task

    @property
    def section(self) -> str:
        """Its section's name in the file."""
        parts = ([] if self.family == "plain" else [self.family]) + ([EVAL] if self.kind == EVAL else [])
        return ".".join([*parts, self.precision, self.task])


def parse_weight_tolerances(matrix_file: Path, name: Any) -> dict[TaskKey, WeightTolerance]:
    """The weight entries of the file `[tolerances] weights_per_task` names, every family's."""
    return _parse(matrix_file, name, "state_dict")


def parse_eval_tolerances(matrix_file: Path, name: Any) -> dict[TaskKey, WeightTolerance]:
    """The eval-output entries of that file ([eval.<precision>.<task>], [zero.eval...])."""
    return _parse(matrix_file, name, EVAL)


def _parse(matrix_file: Path, name: Any, kind: str) -> dict[TaskKey, WeightTolerance]:
    path, table = _load(matrix_file, name)
    found: dict[TaskKey, WeightTolerance] = {}
    for family in ENTRY_FAMILIES:
        top = table if family == "plain" else _table(table, family, path, f"[{family}.<precision>.<task>]")
        if kind == EVAL:
            top = _table(top, EVAL, path, f"[{_prefix(family, kind)}<precision>.<task>]", family)
        else:
            top = {k: v for k, v in top.items() if k != EVAL and k not in ENTRY_FAMILIES}
        found.update(_entries(path, top, kind, family))
    return found


def _table(table: dict[str, Any], key: str, path: Path, valid: str, family: str = "plain") -> dict[str, Any]:
    section = table.get(key, {})
    if not isinstance(section, dict):
        raise ToleranceError(explain(f"{_prefix(family, 'state_dict')}{key} in {path}", "not a table",
                                     f"{valid} sections", f"rewrite the file with `{WRITE}`"))
    return section


def _prefix(family: str, kind: str) -> str:
    return ("" if family == "plain" else f"{family}.") + (f"{EVAL}." if kind == EVAL else "")


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


def _entries(path: Path, table: dict[str, Any], kind: str, family: str) -> dict[TaskKey, WeightTolerance]:
    prefix = _prefix(family, kind)
    entries: dict[TaskKey, WeightTolerance] = {}
    for precision, tasks in table.items():
        if not isinstance(tasks, dict):
            continue  # the file's own header values (safety_factor, measured_on)
        if precision not in HALF_PRECISIONS:
            raise ToleranceError(explain(f"[{prefix}{precision}] in {path}", "not a half precision",
                                         HALF_PRECISIONS,
                                         "fp32 cells keep [tolerances.fp32.plain]; remove the section"))
        for task, body in tasks.items():
            entries[(family, precision, task)] = _entry(path, precision, task, body, kind, family)
    return entries


def _entry(path: Path, precision: str, task: str, body: Any, kind: str, family: str) -> WeightTolerance:
    where = f"[{_prefix(family, kind)}{precision}.{task}] in {path}"
    if not isinstance(body, dict) or sorted(body) != sorted(FIELDS):
        got = sorted(body) if isinstance(body, dict) else type(body).__name__
        raise ToleranceError(explain(where, f"its keys are {got}", list(FIELDS),
                                     f"rewrite the file with `{WRITE}`"))
    rtol, atol, need = measured_fields(body, where)
    return WeightTolerance(precision, task, rtol, atol, need, str(body["variant"]), str(body["where"]),
                           str(body["reason"]), kind, family)


def measured_fields(body: dict[str, Any], where: str) -> tuple[float, float, float]:
    """An entry's rtol, atol and need, validated: numbers >= 0, the atol covering its need."""
    try:
        rtol, atol, need = float(body["rtol"]), float(body["atol"]), float(body["need"])
    except (TypeError, ValueError):
        raise ToleranceError(explain(where, "rtol, atol or need is not a number", "numbers >= 0",
                                     "fix the entry")) from None
    if min(rtol, atol, need) < 0 or atol < need:
        raise ToleranceError(explain(where, f"rtol {rtol:g}, atol {atol:g}, need {need:g}",
                                     "numbers >= 0 with atol >= need (the tolerance covers its noise)",
                                     "fix the entry"))
    return rtol, atol, need
