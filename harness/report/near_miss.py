"""Near misses: passed cells that used most of a tolerance (at or above NEAR_MISS_SHARE of it).

A cell that passes with 5% to spare is the next flake, or the next bug a looser tolerance would
have hidden; sorting the passed cells by margin (report.html) shows it only to a reader who
scrolls there. Every report format lists near misses in its summary instead (report.md and
report.html under the headline, junit.xml's suite properties, report.json's "near_misses", the
terminal's closing lines), each with the quantity and the share.

The share is the cell's margin as summary.margin / summary.tolerance_share compute it for the
passed list, so the two always agree; an unknown share counts as a near miss (unknown is never
a comfortable margin).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.judge.outcome import CellResult, Status
from harness.report.summary import margin, tolerance_share
from harness.report.text import percent

# 80%: a fifth of the bound left. Below it, shares of real passing cells spread over orders of
# magnitude (bit-identical 0%, fp32 reductions <1%, bf16 tens of percent); above it, one
# unlucky reduction order away from failing.
NEAR_MISS_SHARE = 0.8


@dataclass(frozen=True)
class NearMiss:
    result: CellResult
    quantity: str  # the comparison that used the largest share of its tolerance
    share: float  # that share: 1.0 is exactly at the bound, inf unknown

    @property
    def id(self) -> str:
        return self.result.id

    @property
    def share_text(self) -> str:
        return f"{percent(self.share)} of its tolerance" if math.isfinite(self.share) else "an unknown share"

    @property
    def text(self) -> str:
        """'losses at 95% of its tolerance'."""
        return f"{self.quantity} at {self.share_text}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "quantity": self.quantity, "share": self.share,
                "environment": self.result.environment}


def near_misses(results: Sequence[CellResult], threshold: float = NEAR_MISS_SHARE) -> list[NearMiss]:
    """Passed cells at or above `threshold` of a tolerance, the closest to failing first (the
    run's order within a tie). Failed cells are not near misses: they missed."""
    found = []
    for result in results:
        worst = margin(result)
        if Status(result.status) is not Status.PASSED or worst is None:
            continue
        share = tolerance_share(worst)
        if share >= threshold:
            found.append(NearMiss(result, worst.quantity, share))
    return sorted(found, key=lambda miss: -miss.share)


def rule_text(threshold: float = NEAR_MISS_SHARE) -> str:
    """What a near miss is, in words, for every format's heading."""
    return f"passed at {percent(threshold)} or more of a tolerance"


def count_text(misses: Sequence[NearMiss]) -> str:
    """'1 near miss', '3 near misses'."""
    return f"{len(misses)} near miss" + ("" if len(misses) == 1 else "es")


def near_misses_json(results: Sequence[CellResult]) -> dict[str, Any]:
    """report.json's "near_misses": {"threshold", "count", "cells": [{"id", "quantity", "share",
    "environment"}]}, closest first."""
    misses = near_misses(results)
    return {"threshold": NEAR_MISS_SHARE, "count": len(misses), "cells": [m.to_json() for m in misses]}
