"""`--shard K/N`: the split of a selection (harness.shard.split), its costs (harness.shard.costs)
and the command line's refusals. Pure functions of the selection and the costs: no launch here."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.main import build_parser, main
from harness.errors import UsageError
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.plan.selection import select
from harness.run.runner import launch_group_key
from harness.shard.costs import STARTUP_S, CostModel, load_costs, table_seconds
from harness.shard.split import SLACK, plan_shards, shape_of
from tests.harness.runner_helpers import REPO_ROOT

CPU = "not gpu and not multi_gpu"


def cpu_cells(resume: bool = False) -> list[Cell]:
    """The core's CPU cells (docs/implementations.md); with `resume`, the resume grid too, as
    `list`/`run -m CPU` select them (docs/resume.md)."""
    matrix = load_matrix()
    cells = [c for c in matrix.cells if c.implementation == "core"]
    return select(cells + (list(matrix.resume_cells) if resume else []), None, CPU)


def ids_of(cells: list[Cell], positions: tuple[int, ...]) -> list[str]:
    return [cells[i].id for i in positions]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 200])
def test_shards_are_disjoint_cover_the_selection_and_keep_its_order(count: int) -> None:
    cells = load_matrix().cells  # every cell, CUDA ones too: the split never asks the host
    plan = plan_shards(cells, count, CostModel())
    assert len(plan.shards) == count
    every = [p for shard in plan.shards for p in shard]
    assert sorted(every) == list(range(len(cells))), "each cell in exactly one shard"
    for shard in plan.shards:
        assert list(shard) == sorted(shard), "a shard runs its cells in the selection's order"


@pytest.mark.parametrize("count", [2, 3, 4, 6])
def test_the_cpu_matrix_is_balanced(count: int) -> None:
    cells = cpu_cells()
    plan = plan_shards(cells, count, CostModel())
    # The best any split can do: every cell's seconds and one start-up per shape, spread evenly.
    shapes = {shape_of(c) for c in cells}
    bound = (sum(table_seconds(c) for c in cells) + STARTUP_S * len(shapes)) / count
    assert max(plan.seconds) <= bound * (1 + SLACK) + STARTUP_S, plan.seconds
    assert max(plan.seconds) - min(plan.seconds) < STARTUP_S, "no shard waits a launch's start-up longer"


def test_whole_shapes_stay_together_when_that_balances() -> None:
    """Two shapes of about equal cost in two shards: one launch each, no shape cut in two."""
    cells = [Cell("regression", "cpu", 1, "single", p) for p in ("fp32", "fp16", "bf16")] * 1
    cells += [Cell(t, "cpu", 1, "single", "fp32") for t in ("lm", "scalar", "dropout")]
    cells += [Cell(t, "cpu", 2, "ddp", p) for t in ("regression", "lm") for p in ("fp32", "bf16")]
    plan = plan_shards(cells, 2, CostModel())
    shapes = [{shape_of(cells[i]) for i in shard} for shard in plan.shards]
    assert sorted(map(sorted, shapes)) == [["cpu1"], ["cpu2"]]


@pytest.mark.parametrize("resume", [False, True])
def test_a_dominant_shape_is_cut_and_each_cut_costs_one_launch_more(resume: bool) -> None:
    cells = cpu_cells(resume)  # cpu2 holds most of the CPU matrix's seconds: it must be cut
    shapes = len({shape_of(c) for c in cells})
    for count in (2, 3, 4):
        plan = plan_shards(cells, count, CostModel())
        launches = sum(len({shape_of(cells[i]) for i in shard}) for shard in plan.shards)
        assert launches <= shapes + count - 1, "at most N-1 shapes are cut (a greedy would pay N each)"


def test_the_shape_is_the_runners_launch_group() -> None:
    for cell in load_matrix().cells:
        assert shape_of(cell) == launch_group_key(cell)


def test_the_split_does_not_depend_on_the_order_cells_come_in() -> None:
    cells = cpu_cells()
    plan = plan_shards(cells, 3, CostModel())
    shuffled = cells[:]
    random.Random(7).shuffle(shuffled)
    again = plan_shards(shuffled, 3, CostModel())
    first = [sorted(ids_of(cells, s)) for s in plan.shards]
    assert first == [sorted(ids_of(shuffled, s)) for s in again.shards]


_PRINT_PLAN = """
import json
from harness.shard.costs import CostModel
from harness.shard.split import plan_shards
from harness.plan.matrix import load_matrix
cells = load_matrix().cells
print(json.dumps([[cells[i].id for i in s] for s in plan_shards(cells, 5, CostModel()).shards]))
"""


def test_two_processes_with_other_hash_seeds_and_devices_compute_the_same_split() -> None:
    """What another machine sees differently (hash seed, devices) changes nothing."""
    runs = [subprocess.Popen([sys.executable, "-c", _PRINT_PLAN], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONHASHSEED": seed,
                                             "CUDA_VISIBLE_DEVICES": devices})
            for seed, devices in (("1", ""), ("4242", "0,1"))]
    outputs = [json.loads(run.communicate(timeout=120)[0]) for run in runs]
    assert outputs[0] == outputs[1] and sum(map(len, outputs[0])) == len(load_matrix().cells)


def _costs_file(path: Path, seconds: dict[str, float], startup: dict[str, float] | None = None) -> Path:
    cells = [{"id": i, "status": "passed", "duration_s": s} for i, s in seconds.items()]
    cells.append({"id": "lm-cuda1-single-fp32", "status": "skipped", "duration_s": 0.0})
    path.write_text(json.dumps({"environment": {"name": "x", "startup": startup}, "cells": cells}))
    return path


def test_measured_costs_override_the_table_and_scale_the_rest(tmp_path: Path) -> None:
    a, b = "regression-cpu1-single-fp32", "regression-cpu2-zero3-fp32"
    costs = load_costs(_costs_file(tmp_path / "r.json", {a: 0.9, b: 5.7}, {"launches": 2, "total_s": 30.0}))
    assert costs.cell_seconds(Cell.from_id(a)) == 0.9 and costs.startup_s == 15.0
    # Ten times the table where measured: a cell the file does not hold is taken ten times slower too.
    assert costs.cell_seconds(Cell.from_id("lm-cpu2-ddp-fp32")) == pytest.approx(1.9)
    assert costs.source.startswith("sha256:")
    # A measured cell as costly as the two others together gets a shard of its own, though the
    # ids put it between them.
    scalar, lm = "scalar-cpu1-single-fp32", "lm-cpu1-single-fp32"
    cells = [Cell.from_id(i) for i in (a, scalar, lm)]
    heavy = load_costs(_costs_file(tmp_path / "h.json", {a: 10.0, scalar: 5.0, lm: 5.0},
                                   {"launches": 1, "total_s": 1.0}))
    plan = plan_shards(cells, 2, heavy)
    assert [ids_of(cells, s) for s in plan.shards] == [[a], [scalar, lm]] and plan.seconds == (11.0, 11.0)


@pytest.mark.parametrize("content, why", [
    (None, "cannot be read as JSON"),
    ("{", "cannot be read as JSON"),
    ("[]", "not a report"),
    ('{"cells": [{"id": "x", "status": "skipped", "duration_s": 1}]}', "no cell that ran"),
])
def test_a_bad_costs_file_is_explained(tmp_path: Path, content: str | None, why: str) -> None:
    path = tmp_path / "costs.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError) as caught:
        load_costs(path)
    message = str(caught.value)
    assert f"--shard-costs {str(path)!r}" in message and why in message
    assert "Valid: " in message and "Fix: " in message


@pytest.mark.parametrize("value, why", [
    ("0/3", "K counts the shards from 1, so it must be 1 to 3"),
    ("4/3", "K counts the shards from 1, so it must be 1 to 3"),
    ("a/b", "it is not two whole numbers K/N"),
    ("3", "it is not two whole numbers K/N"),
    ("1/0", "N (the number of shards) must be 1 to"),
    ("-1/3", "it is not two whole numbers K/N"),
])
def test_a_bad_shard_exits_2_with_what_why_valid_and_fix(
    value: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("run", "list"):
        with pytest.raises(SystemExit) as done:
            build_parser().parse_args([command, f"--shard={value}"])  # = : "-1/3" is no option
        assert done.value.code == 2
        message = capsys.readouterr().err
        assert f"--shard {value!r}: {why}" in message and "Valid: K/N" in message and "Fix: " in message


def test_shard_costs_without_shard_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    costs = _costs_file(tmp_path / "r.json", {"regression-cpu1-single-fp32": 1.0})
    assert main(["list", "-k", "regression-cpu1", "--shard-costs", str(costs)]) == 2
    assert "no --shard was given" in capsys.readouterr().err


def test_list_shows_one_shard(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "-m", CPU, "--shard", "2/3"]) == 0
    printed = capsys.readouterr().out.splitlines()
    cells = cpu_cells(resume=True)
    plan = plan_shards(cells, 3, CostModel())
    assert printed[0].startswith(f"shard 2/3: {len(plan.shards[1])} of {len(cells)} selected cell(s)")
    assert [line.split()[0] for line in printed[1:-1]] == ids_of(cells, plan.shards[1])
