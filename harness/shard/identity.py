"""What each shard's report.json says about itself: which part it ran, and what it ran against.

report.json's "environment" carries it as "shard" (the report writer puts the environment block
in every format as it is given, so no writer changes):

    {"index": K, "count": N,
     "cells": [ids of this shard, in run order], "positions": [each one's place in the selection],
     "selected": cells in the whole selection, "estimated_s": this shard's planned seconds,
     "selection": {"k": -k, "m": -m},
     "run": {"commit", "matrix_sha256", "goldens_sha256", "selection_sha256", "costs"}}

The merge refuses shards whose "run" differ: shards of another commit, matrix file, goldens,
selection or cost source are parts of different runs, whose union is no run at all.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.paths import REPO_ROOT
from harness.plan.cell import Cell
from harness.plan.matrix import Matrix
from harness.shard.costs import CostModel
from harness.shard.spec import ShardSpec
from harness.shard.split import Plan


def git_commit(root: Path = REPO_ROOT) -> str | None:
    """The harness checkout's HEAD; None outside a git checkout (e.g. an installed harness)."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else None


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def goldens_sha256(matrix: Matrix, cells: Sequence[Cell]) -> str:
    """The goldens the whole selection is judged against (each golden's JSON holds its tensors'
    sha256, so hashing the JSON covers the tensors); one a task has none of counts as missing."""
    from harness.golden.golden_store import golden_stem_to_read

    digest = hashlib.sha256()
    for task, precision in sorted({(cell.task, cell.precision) for cell in cells}):
        stem = golden_stem_to_read(task, precision, matrix.golden_dir)
        path = stem.with_name(stem.name + ".json")
        digest.update(f"{task}-{precision}\0".encode())
        digest.update(path.read_bytes() if path.is_file() else b"(missing)")
        digest.update(b"\0")
    return digest.hexdigest()


def selection_sha256(cells: Sequence[Cell]) -> str:
    return hashlib.sha256("\n".join(cell.id for cell in cells).encode()).hexdigest()


def shard_block(spec: ShardSpec, plan: Plan, cells: Sequence[Cell], matrix: Matrix, costs: CostModel,
                keyword: str | None, markexpr: str | None) -> dict[str, Any]:
    """The "shard" entry of report.json's environment (module docstring)."""
    positions = plan.shards[spec.index - 1]
    return {
        "index": spec.index,
        "count": spec.count,
        "cells": [cells[i].id for i in positions],
        "positions": list(positions),
        "selected": len(cells),
        "estimated_s": plan.seconds[spec.index - 1],
        "selection": {"k": keyword, "m": markexpr},
        "run": {
            "commit": git_commit(),
            "matrix_sha256": file_sha256(matrix.path),
            "goldens_sha256": goldens_sha256(matrix, cells),
            "selection_sha256": selection_sha256(cells),
            "costs": costs.source,
        },
    }
