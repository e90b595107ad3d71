"""How far a golden may move when it is regenerated on another machine: the table in
`matrix/golden/regeneration.toml`, one entry per precision, each with the measurement behind it.

This is not a cell's comparison tolerance (matrix.toml's [tolerances]); it is far tighter, and
it only decides whether `golden --check` on another CPU says "reproduced within" or "changed".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomllib

from harness.record import explain

REGENERATION_TABLE = Path(__file__).resolve().parents[1] / "matrix" / "golden" / "regeneration.toml"


class RegenerationTableError(ValueError):
    """The regeneration table is missing an entry or has a malformed one."""


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
    entry = table.get(precision)
    where = f"[{precision}] in {path}"
    if not isinstance(entry, dict):
        raise RegenerationTableError(explain(where, "the section is missing", sorted(table),
                                             "add it with rtol, atol and the measurement behind them"))
    try:
        rtol, atol, reason = float(entry["rtol"]), float(entry["atol"]), str(entry["reason"]).strip()
    except (KeyError, TypeError, ValueError) as exc:
        raise RegenerationTableError(explain(where, f"entry {exc} is missing or not a number",
                                             "rtol = <float>, atol = <float>, reason = <text>",
                                             "complete the entry")) from None
    if rtol < 0 or atol < 0 or not reason:
        raise RegenerationTableError(explain(where, "rtol/atol must be >= 0 and the reason written out",
                                             "rtol >= 0, atol >= 0, a non-empty reason", "fix the entry"))
    return RegenerationTolerance(precision=precision, rtol=rtol, atol=atol, reason=reason)
