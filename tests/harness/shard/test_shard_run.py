"""`python -m harness run --shard K/N` around the split: a shard with nothing to run, and
resuming a shard's report dir only as that shard. The CLI runs in this process
(harness.cli.main.main); the empty shard starts no launch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli.shard import check_resumed_shard
from harness.errors import UsageError
from tests.harness.runner_helpers import SMALL_MATRIX, report, run_harness_in_process, write_matrix


def test_a_shard_with_no_cell_writes_an_empty_report_for_the_merge(tmp_path: Path) -> None:
    """More shards than the selection fills (here each of the two cells' launches stays whole,
    in shards 1 and 2): the others still leave a report, so the merge finds every shard."""
    matrix = write_matrix(tmp_path, SMALL_MATRIX)
    done = run_harness_in_process("run", "--matrix", str(matrix), "-k", "cpu1 or cpu2", "--shard", "3/3",
                                  "--report-dir", str(tmp_path / "shard-3"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "shard 3/3: 0 of 2 selected cell(s)" in done.stdout
    data = report(tmp_path / "shard-3")
    assert data["cells"] == [] and data["total"] == 0
    block = data["environment"]["shard"]
    assert (block["index"], block["count"], block["cells"], block["selected"]) == (3, 3, [], 2)


def _shard_dir(directory: Path, shard: tuple[int, int] | None) -> Path:
    environment: dict[str, object] = {"name": "deepspeed"}
    if shard is not None:
        environment["shard"] = {"index": shard[0], "count": shard[1]}
    directory.mkdir()
    (directory / "report.json").write_text(json.dumps({"environment": environment, "cells": []}))
    return directory


@pytest.mark.parametrize("earlier, now, refused", [
    ((2, 3), (2, 3), None),
    (None, None, None),
    ((2, 3), (1, 3), "that report dir holds shard 2/3"),
    ((2, 3), (2, 4), "that report dir holds shard 2/3"),
    ((2, 3), None, "that report dir holds shard 2/3"),
    (None, (1, 3), "that report dir holds an unsharded run"),
])
def test_a_shard_resumes_only_its_own_report_dir(
    tmp_path: Path, earlier: tuple[int, int] | None, now: tuple[int, int] | None, refused: str | None
) -> None:
    directory = _shard_dir(tmp_path / "earlier", earlier)
    block = None if now is None else {"index": now[0], "count": now[1]}
    if refused is None:
        check_resumed_shard(directory, block)
        return
    with pytest.raises(UsageError) as caught:
        check_resumed_shard(directory, block)
    message = str(caught.value)
    assert refused in message and "Valid: " in message and "Fix: " in message
