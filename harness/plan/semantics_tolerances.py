"""Per-task tolerances of the own-semantics check: how far a half-precision CPU cell's final
weights may lie from the plain reference computed the way the cell's backend computes
(harness.calibrate.reduction_order: its ranks' split of each batch, their thread count, and in
fp16/bf16 that backend's own half precision, e.g. ZeRO's model held in half).

A golden comparison must allow a ZeRO bf16 cell the distance between DeepSpeed's precision and
the golden's autocast (half a bf16 ulp of every weight, before any bug); this reference computes
DeepSpeed's precision itself, on the judging machine, so what is left to allow is only what may
legitimately change its bits: another thread count, another kernel level, another accumulation
order inside a half GEMM. `python -m harness calibrate --write-weight-tolerances` measures that
per task, precision and semantics and writes, beside the measurement, `atol` = safety factor x
the worst |weight - reference| of those variations, never below the fp32 cells' atol (a master
weight is an fp32 number: it is never required closer than an fp32 cell's), `rtol` = 0.

matrix.toml names the file in `[tolerances] semantics_per_task = "<file beside it>"`. Sections
are `[<precision>.<task>.<semantics>]`, the semantics being the reference's name (e.g.
"splits_2_zero2": two ranks, ZeRO-2/3's half precision). A cell without an entry, or outside the
cells the reference reproduces (harness.calibrate.exact_judge.why_not_in_tier), is judged by its
golden comparison alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from harness.errors import ToleranceError, explain
from harness.plan.weight_tolerances import FIELDS, HALF_PRECISIONS, measured_fields

WRITE = "python -m harness calibrate --write-weight-tolerances"
SEMANTICS_PER_TASK = "semantics_per_task"  # the [tolerances] key naming the file
# (precision, golden task, semantics): the key of an entry
SemanticsKey = tuple[str, str, str]


@dataclass(frozen=True)
class SemanticsTolerance:
    precision: str
    task: str  # the golden's task
    semantics: str  # the reference's name (harness.calibrate.reduction_order.reduction_order_perturbation)
    rtol: float
    atol: float
    need: float  # the worst |weight - reference| of the benign variations
    variant: str  # the variation that reached it
    where: str  # the quantity it was reached on
    reason: str

    @property
    def key(self) -> SemanticsKey:
        return self.precision, self.task, self.semantics

    @property
    def section(self) -> str:
        return f"{self.precision}.{self.task}.{self.semantics}"


def parse_semantics_tolerances(matrix_file: Path, name: Any) -> dict[SemanticsKey, SemanticsTolerance]:
    path, table = _load(matrix_file, name)
    found: dict[SemanticsKey, SemanticsTolerance] = {}
    for precision, tasks in table.items():
        if not isinstance(tasks, dict):
            continue  # the file's header values (safety_factor, measured_on)
        if precision not in HALF_PRECISIONS:
            raise ToleranceError(explain(f"[{precision}] in {path}", "not a half precision", HALF_PRECISIONS,
                                         f"rewrite the file with `{WRITE}`"))
        for task, semantics in tasks.items():
            if not isinstance(semantics, dict):
                raise ToleranceError(explain(f"[{precision}.{task}] in {path}", "not a table of semantics",
                                             "[<precision>.<task>.<semantics>] sections",
                                             f"rewrite the file with `{WRITE}`"))
            for name_, body in semantics.items():
                where = f"[{precision}.{task}.{name_}] in {path}"
                if not isinstance(body, dict) or sorted(body) != sorted(FIELDS):
                    got = sorted(body) if isinstance(body, dict) else type(body).__name__
                    raise ToleranceError(explain(where, f"its keys are {got}", list(FIELDS),
                                                 f"rewrite the file with `{WRITE}`"))
                rtol, atol, need = measured_fields(body, where)
                found[(precision, task, name_)] = SemanticsTolerance(
                    precision, task, name_, rtol, atol, need, str(body["variant"]), str(body["where"]),
                    str(body["reason"]))
    return found


def _load(matrix_file: Path, name: Any) -> tuple[Path, dict[str, Any]]:
    where = f"[tolerances] {SEMANTICS_PER_TASK} in {matrix_file}"
    if not isinstance(name, str) or not name:
        raise ToleranceError(explain(where, f"{name!r} is not a file name", "a TOML file beside matrix.toml",
                                     f'write {SEMANTICS_PER_TASK} = "semantics_tolerances.toml"'))
    path = matrix_file.parent / name
    try:
        return path, tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ToleranceError(explain(f"{where}: {path}", "the file does not exist",
                                     f"a file written by `{WRITE}`",
                                     f"write it with that command, or remove {SEMANTICS_PER_TASK}")) from None
    except tomllib.TOMLDecodeError as exc:
        raise ToleranceError(explain(str(path), f"not valid TOML ({exc})", "a TOML file",
                                     f"rewrite it with `{WRITE}`")) from None
