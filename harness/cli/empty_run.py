"""No empty green: a run in which no selected cell could run is not a success.

A GPU job on a runner whose torch sees no CUDA device skips every cell; reported as "120 skipped,
exit 0" it would go green having proved nothing. Such a run exits EXIT_NOTHING_RAN (pytest's
"no tests ran" status, for the same reason) with the skip reasons counted, unless the user says a
run with nothing to do is fine (`--allow-empty`). A shard that the plan gave no cell is not
empty in this sense: its emptiness is the split's, and the merged report judges the whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from harness.judge.outcome import CellResult, Status

EXIT_NOTHING_RAN = 5


def nothing_ran(results: Sequence[CellResult]) -> bool:
    """Cells were selected and every one of them was skipped."""
    return bool(results) and all(r.status == Status.SKIPPED for r in results)


def nothing_ran_message(results: Sequence[CellResult], env_name: str) -> str:
    reasons = Counter(r.reason or "no reason given" for r in results)
    counted = "; ".join(f"{count} x {reason}" for reason, count in reasons.most_common(3))
    more = f"; and {len(reasons) - 3} other reason(s)" if len(reasons) > 3 else ""
    return (f"environment {env_name}: 0 of {len(results)} selected cell(s) could run here, every one "
            f"was skipped ({counted}{more}). A run that judged nothing is not a pass: run it where "
            "the cells can run (see `python -m harness list` for each cell's skip reason), or pass "
            "--allow-empty if a run with nothing to do is fine.")
