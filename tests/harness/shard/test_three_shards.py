"""One environment on many machines, shown on this one: three shards of a small matrix run as
three concurrent processes, each into its own report dir, and `report merge` joins them into what
the unsharded run reports: the same cells in the same order, statuses, comparisons and records.

The shards are real `python -m harness` processes, run side by side; the unsharded run, meanwhile,
is the same command in this process (harness.cli.main.main: no fourth interpreter importing
torch), its launch a real torchrun like theirs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from harness.cli.main import main
from harness.shard.identity import git_commit
from tests.harness.runner_helpers import (
    REPO_ROOT,
    assert_no_leftovers,
    harness_cmd,
    output_tail,
    report,
    run_harness_in_process,
    write_matrix,
)

pytestmark = [pytest.mark.slow, pytest.mark.goldens]

# Three of the cheapest cells (one process, fp32, checked-in goldens): one launch per shard.
TASKS = ("regression", "scalar", "root_param")
MATRIX = f"""
[axes]
task = {json.dumps(list(TASKS))}
device = ["cpu"]
strategy = ["single"]
precision = ["fp32"]

[[shapes]]
device = "cpu"
processes = 1
strategies = ["single"]
"""
IDS = [f"{task}-cpu1-single-fp32" for task in TASKS]


def costs_file(path: Path) -> Path:
    """Costs under which each cell is worth a shard of its own: measured cells far longer than a
    start-up. (By the built-in table three cheap cells share one launch, and two shards idle.)"""
    cells = [{"id": cell_id, "status": "passed", "duration_s": 30.0} for cell_id in IDS]
    path.write_text(json.dumps({"environment": {"startup": {"launches": 1, "total_s": 1.0}}, "cells": cells}))
    return path


def start(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "CI": "1"}  # plain progress lines
    return subprocess.Popen(harness_cmd(*args), cwd=REPO_ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finish(run: subprocess.Popen[str]) -> str:
    output, _ = run.communicate(timeout=300)
    assert run.returncode == 0, output[-3000:]
    return output


def outcome(cell: dict[str, Any]) -> tuple[Any, ...]:
    compared = [(c["quantity"], c["ok"], c["max_abs_diff"]) for c in cell["comparisons"]]
    return cell["id"], cell["status"], cell["reason"], cell["environment"], compared


def record_hashes(report_dir: Path, cell_id: str) -> tuple[str, str]:
    """The record's own hash of its tensors (in its JSON) and the tensors file's sha256."""
    stem = report_dir / "records" / cell_id
    tensors = hashlib.sha256(stem.with_name(cell_id + ".safetensors").read_bytes()).hexdigest()
    return json.loads(stem.with_name(cell_id + ".json").read_text())["tensors_sha256"], tensors


def test_three_concurrent_shards_merge_into_the_unsharded_run(tmp_path: Path) -> None:
    matrix = str(write_matrix(tmp_path, MATRIX))
    costs = str(costs_file(tmp_path / "costs.json"))
    shards = [tmp_path / f"shard-{k}" for k in (1, 2, 3)]
    began = time.monotonic()
    runs = [start("run", "--matrix", matrix, "--shard", f"{k}/3", "--shard-costs", costs,
                  "--report-dir", str(shard)) for k, shard in enumerate(shards, start=1)]
    try:
        whole = run_harness_in_process("run", "--matrix", matrix, "--report-dir", str(tmp_path / "whole"))
        printed = [finish(run) for run in runs]
    finally:
        for run in runs:  # a failure above leaves no shard running
            if run.poll() is None:
                run.kill()
                run.wait()
    assert whole.returncode == 0, output_tail(whole)
    print(f"3 shards and the unsharded run, side by side: {time.monotonic() - began:.1f} s")

    blocks = [report(shard)["environment"]["shard"] for shard in shards]
    for k, (block, output) in enumerate(zip(blocks, printed, strict=False), start=1):
        assert (block["index"], block["count"], block["selected"]) == (k, 3, 3)
        assert len(block["cells"]) == 1, "the costs give each shard one cell"
        assert f"shard {k}/3: 1 of 3 selected cell(s)" in output
        assert [c["id"] for c in report(shards[k - 1])["cells"]] == block["cells"]
    assert sorted(c for b in blocks for c in b["cells"]) == sorted(IDS), "disjoint, and every cell once"
    assert all(b["run"] == blocks[0]["run"] for b in blocks), "one commit, matrix, goldens, selection"
    assert blocks[0]["run"]["commit"] == git_commit()

    assert main(["report", "merge", *map(str, shards), "--out", str(tmp_path / "merged")]) == 0
    assert main(["report", "merge", str(tmp_path / "whole"), "--out", str(tmp_path / "merged-whole")]) == 0
    merged, unsharded = report(tmp_path / "merged"), report(tmp_path / "merged-whole")
    assert [outcome(c) for c in merged["cells"]] == [outcome(c) for c in unsharded["cells"]]
    assert [c["id"] for c in merged["cells"]] == IDS and merged["summary"] == unsharded["summary"]
    assert merged["summary"]["passed"] == 3 and merged["ok"] is True
    for cell_id, block in ((c, b) for b in blocks for c in b["cells"]):
        shard = shards[block["index"] - 1]
        assert record_hashes(shard, cell_id) == record_hashes(tmp_path / "whole", cell_id), cell_id
    assert_no_leftovers(str(tmp_path))
