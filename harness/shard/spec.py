"""`--shard K/N`: which of N parts of the selection this run takes (K counts from 1)."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from harness.errors import explain

_FORM = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
MAX_SHARDS = 1000  # far above any CI fan-out; a typo like 3/300000 is caught, not planned


@dataclass(frozen=True)
class ShardSpec:
    index: int  # 1..count
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> ShardSpec:
    """argparse `type=` for --shard: a bad value exits 2 with what, why, valid and fix."""
    match = _FORM.match(text)
    index, count = (int(match[1]), int(match[2])) if match else (0, 0)
    if match is None:
        why = "it is not two whole numbers K/N"
    elif not 1 <= count <= MAX_SHARDS:
        why = f"N (the number of shards) must be 1 to {MAX_SHARDS}"
    elif not 1 <= index <= count:
        why = f"K counts the shards from 1, so it must be 1 to {count}"
    else:
        return ShardSpec(index, count)
    shown = count if 1 <= count <= MAX_SHARDS else 3  # the N given, when that part was right
    example = ", ".join(f"{k}/{shown}" for k in range(1, min(shown, 3) + 1))
    raise argparse.ArgumentTypeError(explain(
        f"--shard {text!r}", why, f"K/N with 1 <= K <= N, e.g. {example}",
        "give each of N machines its own K, the same N and the same selection"))
