"""`python -m harness script`: the repository's user-loop example (examples/train.py, unchanged)
run through the launcher on one process and under DDP, recorded by its own Accelerator, and
judged against its reference cell: it passes with a per-process batch that keeps the global
batch (`{8/processes}`), and fails, naming what moved, with one that does not (the classic
bug of a script ported to N processes without dividing its batch). Four launches in all.

`python -m harness script` runs in this process (tests/harness/runner_helpers.py,
run_harness_in_process: its exit code and output captured, what it changes put back): the
launches it makes (`accelerate-core launch` per cell) are the real ones, and a child process for
the harness itself would only add a torch import.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.harness.runner_helpers import REPO_ROOT, run_harness_in_process

EXAMPLE = REPO_ROOT / "examples" / "train.py"
SELECTION = "fp32 and (cpu1 or ddp) and not cuda"

pytestmark = [pytest.mark.slow, pytest.mark.ddp]


def _script(tmp_path: Path, name: str, batch: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    report = tmp_path / name
    done = run_harness_in_process(
        "script", "-k", SELECTION, "--report-dir", str(report),
        str(EXAMPLE), "--out", "{cell_dir}/model.pt", "--batch-size", batch, timeout=600)
    cells = {}
    if (report / "report.json").exists():
        cells = {c["id"]: c for c in json.loads((report / "report.json").read_text())["cells"]}
    return done, cells


def _out(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def test_the_user_loop_example_matches_its_reference_under_ddp(tmp_path: Path) -> None:
    done, cells = _script(tmp_path, "keeps-global-batch", "{8/processes}")
    assert done.returncode == 0, _out(done)
    assert cells["train-cpu1-single-fp32"]["status"] == "passed"  # the reference ran and recorded
    ddp = cells["train-cpu2-ddp-fp32"]
    assert ddp["status"] == "passed" and "matches train-cpu1-single-fp32" in ddp["reason"], ddp["reason"]
    compared = {c["quantity"] for c in ddp["comparisons"] if c["ok"]}
    # Everything the script computed: 2 epochs x 8 micro-steps of losses and lrs, both gathered
    # eval tensors (by the line that gathered them), all four weights of the final state dict.
    assert {"losses", "lrs", "eval/train.py:89", "eval/train.py:90", "state_dict/body.0.weight",
            "state_dict/body.2.bias"} <= compared
    assert len(ddp["extra"]["losses"]) == 16 and ddp["extra"]["evidence"]["strategy"] == "ddp"
    saved = tmp_path / "keeps-global-batch" / "cells" / "train-cpu2-ddp-fp32" / "model.pt"
    assert saved.is_file()  # {cell_dir} reached the script


def test_a_script_whose_global_batch_grows_with_the_processes_fails_against_its_reference(
        tmp_path: Path) -> None:
    done, cells = _script(tmp_path, "per-process-batch", "4")
    assert done.returncode == 1, _out(done)
    ddp = cells["train-cpu2-ddp-fp32"]
    assert ddp["status"] == "failed", ddp["reason"]
    assert "shape (16,) vs reference (32,)" in ddp["reason"], ddp["reason"]
    assert "final weights" in ddp["reason"], ddp["reason"]
