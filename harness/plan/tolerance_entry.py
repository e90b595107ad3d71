"""Reading one tolerance entry (`rtol`, `atol`, `reason`) from a TOML table, with the one error
message for a missing or malformed entry: shared by the cells' comparison tolerances
(matrix.toml, harness.judge.compare) and the goldens' regeneration tolerances (harness.golden.regeneration).
Imports nothing from accelerate_core (goldens must not)."""

from __future__ import annotations

from collections.abc import Iterable

from harness.errors import explain


def read_entry(entry: object, where: str, valid_sections: Iterable[str],
               error: type[Exception]) -> tuple[float, float, str]:
    """(rtol, atol, reason) of `entry`, the section named `where`; `error` carries a message."""
    if not isinstance(entry, dict):
        raise error(explain(where, "the section is missing", list(valid_sections),
                            "add it with rtol, atol and a reason (the measurement behind them)"))
    try:
        rtol, atol, reason = float(entry["rtol"]), float(entry["atol"]), str(entry["reason"]).strip()
    except (KeyError, TypeError, ValueError) as exc:
        raise error(explain(where, f"entry {exc} is missing or not a number",
                            "rtol = <float>, atol = <float>, reason = <text>",
                            "complete the entry")) from None
    if rtol < 0 or atol < 0 or not reason:
        raise error(explain(where, "rtol/atol must be >= 0 and the reason written out",
                            "rtol >= 0, atol >= 0, a non-empty reason", "fix the entry"))
    return rtol, atol, reason
