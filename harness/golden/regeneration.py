"""How far a golden may move when it is regenerated on another machine: the table in
`matrix/golden/regeneration.toml`, one entry per precision, each with the measurement behind it.

This is not a cell's comparison tolerance (matrix.toml's [tolerances]); it is far tighter, and
it only decides whether `golden --check` on another CPU says "reproduced within" or "changed".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomllib

from harness.errors import RegenerationTableError, explain
from harness.paths import GOLDEN_DIR
from harness.plan.tolerance_entry import read_entry

REGENERATION_TABLE = GOLDEN_DIR / "regeneration.toml"




@dataclass(frozen=True)
class RegenerationTolerance:
    precision: str
    rtol: float
    atol: float
    reason: str

    def describe(self) -> str:
        return f"rtol {self.rtol:g}, atol {self.atol:g}"


def regeneration_tolerance(precision: str, table_path: Path | None = None) -> RegenerationTolerance:
    path = table_path or REGENERATION_TABLE
    try:
        with open(path, "rb") as handle:
            table = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RegenerationTableError(explain(f"regeneration table {path}", f"it cannot be read ({exc})",
                                             "a TOML file with [<precision>] rtol/atol/reason",
                                             "restore it from the repository")) from None
    rtol, atol, reason = read_entry(table.get(precision), f"[{precision}] in {path}", sorted(table),
                                    RegenerationTableError)
    return RegenerationTolerance(precision=precision, rtol=rtol, atol=atol, reason=reason)
