"""`[[exact_tier]]` of matrix.toml: the fp32 CPU cells judged bit for bit against a reference that
follows their backend's reduction order (harness.judge.exact_reference), on top of their golden.

Which cells reach it is measured, never assumed: `python -m harness calibrate --exact-tier DIR`
reruns the reference beside a run's fp32 cells and says which ones are bit-identical
(docs/calibration.md). An entry lists what that measurement found; a cell it does not cover is
judged against its golden alone, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.plan.cell import CORE, Cell
from harness.plan.matrix_entries import Match, bad, parse_match, parse_reason

# Only the project's own core on CPU in fp32: half precision rounds per backend by design, a GPU
# and other implementations were not measured.
PRECISION, DEVICE = "fp32", "cpu"
QUANTITY = "exact_tier"  # the Comparison's quantity in a CellResult and report.json


@dataclass(frozen=True)
class ExactTier:
    match: Match
    reason: str
    environments: tuple[str, ...] = ()  # empty: every environment

    def covers(self, cell: Cell, env_name: str) -> bool:
        return (cell.precision == PRECISION and cell.device == DEVICE and cell.implementation == CORE
                and ":" not in cell.id  # a resume pair continues a checkpoint: not what was measured
                and self.match.matches(cell)
                and (not self.environments or env_name in self.environments))


def parse_exact_tier(file: Path, i: int, entry: Any, valid_axes: dict[str, Any]) -> ExactTier:
    where = f"[[exact_tier]] #{i + 1}"
    match = parse_match(file, where, entry, valid_axes, extra=("environments", "reason"))
    for key, only in (("precision", PRECISION), ("device", DEVICE), ("implementation", CORE)):
        given = match.values.get(key)
        if given is not None and set(given) != {only}:
            raise bad(file, f"{where}.{key}", list(given), f"the exact tier holds {only} cells only",
                      [only], f"drop `{key}` (it is {only} anyway) or write {key} = {only!r}")
    environments = entry.get("environments", [])
    if not isinstance(environments, list) or not all(isinstance(e, str) for e in environments):
        raise bad(file, f"{where}.environments", environments, "it must be a list of environment names",
                  "e.g. [\"deepspeed\"]", "write a list of names from [environments]")
    return ExactTier(match, parse_reason(file, where, entry), tuple(environments))
