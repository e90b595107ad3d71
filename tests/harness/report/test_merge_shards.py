"""`report merge` of shards (`python -m harness run --shard K/N`): one environment's shards joined
into that environment, as its unsharded run would read; refused (exit 2, what/why/valid/fix) when
they overlap, miss a shard or ran another commit, matrix, goldens or selection."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from harness.cli.main import main
from harness.golden.golden_store import load_golden
from harness.judge.outcome import CellResult, Status
from harness.plan.cell import Cell
from harness.report import write_reports

pytestmark = pytest.mark.goldens  # one test saves a golden as two shards' records

SELECTION = ["regression-cpu1-single-fp32", "regression-cpu2-ddp-fp32", "lm-cpu1-single-fp32",
             "regression-cpu2-zero1-fp32", "scalar-cpu1-single-fp32"]
RUN = {"commit": "0" * 40, "matrix_sha256": "m" * 64, "goldens_sha256": "g" * 64,
       "selection_sha256": "s" * 64, "costs": "built-in table"}
THREE = {1: [0, 3], 2: [1, 4], 3: [2]}  # positions of each of 3 shards in SELECTION


def status_of(cell_id: str) -> Status:
    return Status.FAILED if cell_id == "lm-cpu1-single-fp32" else Status.PASSED


def results(name: str, ids: list[str]) -> list[CellResult]:
    return [CellResult(Cell.from_id(i), status=status_of(i), environment=name, duration_s=0.5,
                       reason="losses left tolerance at step 3" if status_of(i) is Status.FAILED else "")
            for i in ids]


def env_block(name: str, host: str = "node-a") -> dict[str, Any]:
    return {"name": name, "python": "3.11.7", "torch": "2.13.0+cpu", "deepspeed": "0.19.8", "hostname": host,
            "startup": {"launches": 1, "total_s": 8.0, "deepspeed_ops_s": None, "per_launch": []}}


def write_shard(directory: Path, index: int, positions: list[int], name: str = "deepspeed", count: int = 3,
                **change: Any) -> Path:
    """A shard's report dir as `python -m harness run --shard index/count` leaves it."""
    ids = [SELECTION[p] for p in positions]
    block = {"index": index, "count": count, "cells": ids, "positions": positions, "selected": len(SELECTION),
             "estimated_s": 9.0, "selection": {"k": None, "m": None}, "run": {**RUN, **change.pop("run", {})}}
    environment = {**env_block(name, host=f"node-{index}"), **change.pop("env", {}), "shard": block}
    write_reports(results(name, change.pop("cells", ids)), environment, directory)
    return directory


def three_shards(tmp_path: Path, name: str = "deepspeed") -> list[Path]:
    return [write_shard(tmp_path / f"{name}-{k}", k, THREE[k], name) for k in (1, 2, 3)]


def merge(*args: object) -> int:
    return main(["report", "merge", *map(str, args)])


def cells(report_dir: Path) -> list[tuple[str, str, str]]:
    data = json.loads((report_dir / "report.json").read_text())
    return [(c["id"], c["status"], c["environment"]) for c in data["cells"]]


def test_shards_merge_into_their_environment_as_the_unsharded_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shards = three_shards(tmp_path)
    whole = tmp_path / "whole"
    write_reports(results("deepspeed", SELECTION), env_block("deepspeed"), whole)
    assert merge(shards[2], shards[0], shards[1], "--out", tmp_path / "sharded") == 1  # lm fails in both
    printed = capsys.readouterr().out
    assert f"3 shards: {shards[0]}, {shards[1]}, {shards[2]}" in printed
    assert merge(whole, "--out", tmp_path / "unsharded") == 1

    assert cells(tmp_path / "sharded") == cells(tmp_path / "unsharded"), "same cells, order, statuses"
    data = json.loads((tmp_path / "sharded" / "report.json").read_text())
    assert data["summary"] == json.loads((tmp_path / "unsharded" / "report.json").read_text())["summary"]
    (environment,) = data["environments"]
    assert environment["name"] == data["environment"]["name"] == "deepspeed" and "shard" not in environment
    assert [s["index"] for s in environment["shards"]] == [1, 2, 3]
    assert [s["directory"] for s in environment["shards"]] == [str(d) for d in shards]
    assert environment["shard_run"] == RUN and environment["hostname"] == "node-1, node-2, node-3"
    assert environment["startup"]["launches"] == 3 and environment["startup"]["total_s"] == 24.0
    (suite,) = ET.parse(tmp_path / "sharded" / "junit.xml").getroot().findall("testsuite")[:1]
    assert suite.get("name") == "matrix[deepspeed]" and suite.get("tests") == "5"


def test_sharded_and_whole_environments_merge_together_and_records_come_from_each_shard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """nodeepspeed in 2 shards, deepspeed whole: the single cell's record, held by nodeepspeed's
    shard 1, is compared bit for bit with deepspeed's."""
    two = {1: [0, 2, 4], 2: [1, 3]}
    nods = [write_shard(tmp_path / f"nods-{k}", k, two[k], "nodeepspeed", count=2) for k in (1, 2)]
    ds = tmp_path / "ds"
    write_reports(results("deepspeed", SELECTION), env_block("deepspeed"), ds)
    golden = load_golden("regression", "fp32")
    for directory in (nods[0], ds):
        golden.save(directory / "records" / SELECTION[0])
    out = tmp_path / "merged"
    assert merge(*nods, ds, "--out", out) == 1  # the lm cell fails in both
    assert "cross-environment: 1 bit-identical, 0 differ" in capsys.readouterr().out
    data = json.loads((out / "report.json").read_text())
    assert [e["name"] for e in data["environments"]] == ["nodeepspeed", "deepspeed"]
    assert [c[2] for c in cells(out)] == ["nodeepspeed"] * 5 + ["deepspeed"] * 5
    (check,) = data["cross_environment"]
    assert check["environments"] == ["nodeepspeed", "deepspeed"] and check["verdict"] == "bit-identical"
    names = [s.get("name") for s in ET.parse(out / "junit.xml").getroot().findall("testsuite")]
    assert names == ["matrix[nodeepspeed]", "matrix[deepspeed]", "cross_environment"]


def test_an_interrupted_shard_says_so_in_the_merged_environment(tmp_path: Path) -> None:
    shards = three_shards(tmp_path)
    write_shard(shards[1], 2, THREE[2], cells=[SELECTION[1]],
                env={"interrupted": "by SIGTERM: 1 of 2 cells finished"})
    assert merge(*shards, "--out", tmp_path / "merged") == 1
    (environment,) = json.loads((tmp_path / "merged" / "report.json").read_text())["environments"]
    assert environment["interrupted"] == "shard 2/3 by SIGTERM: 1 of 2 cells finished"
    assert len(cells(tmp_path / "merged")) == 4


REFUSED = {
    "missing": "shard(s) 2/3 are missing, and their cells with them",
    "twice": "both are shard 2/3 of environment 'deepspeed'",
    "overlap": "both ran cell regression-cpu2-zero1-fp32: the shards overlap",
    "gap": "they hold 5 cell(s) at 5 place(s) of a selection of 6",
    "count": "they split the selection into different numbers of shards",
    "commit": "they ran different commit",
    "matrix": "they ran different matrix_sha256",
    "goldens": "they ran different goldens_sha256",
    "selection": "they ran different selection_sha256",
    "costs": "they ran different costs",
    "torch": "they ran torch '2.13.0+cpu' and '2.14.0+cpu', so they are not one environment",
    "whole_too": "both hold environment 'deepspeed', the first a whole run, the second shard 1/3",
    "malformed": "its report.json's environment.shard is not what `python -m harness run --shard K/N` writes",
    "foreign_cell": "its report holds cell lm-cpu1-single-fp32, which is not in its shard's cells",
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_shards_that_are_not_one_whole_run_exit_2_with_what_why_valid_and_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    dirs = three_shards(tmp_path)
    second = dirs[1]
    if case == "missing":
        dirs.remove(second)
    elif case == "twice":
        dirs.append(write_shard(tmp_path / "again", 2, THREE[2]))
    elif case == "overlap":
        write_shard(second, 2, [1, 3, 4])
    elif case == "gap":
        write_shard(second, 2, [1, 4])
        block = json.loads((second / "report.json").read_text())
        block["environment"]["shard"]["selected"] = 6
        (second / "report.json").write_text(json.dumps(block))
        for shard in (dirs[0], dirs[2]):
            data = json.loads((shard / "report.json").read_text())
            data["environment"]["shard"]["selected"] = 6
            (shard / "report.json").write_text(json.dumps(data))
    elif case == "count":
        write_shard(second, 2, THREE[2], count=4)
    elif case in ("commit", "matrix", "goldens", "selection", "costs"):
        key = case if case in ("commit", "costs") else f"{case}_sha256"
        write_shard(second, 2, THREE[2], run={key: "another"})
    elif case == "torch":
        write_shard(second, 2, THREE[2], env={"torch": "2.14.0+cpu"})
    elif case == "whole_too":
        whole = tmp_path / "whole"
        write_reports(results("deepspeed", SELECTION), env_block("deepspeed"), whole)
        dirs.insert(0, whole)
    elif case == "malformed":
        data = json.loads((second / "report.json").read_text())
        data["environment"]["shard"]["positions"] = ["one"]
        (second / "report.json").write_text(json.dumps(data))
    elif case == "foreign_cell":
        write_shard(second, 2, THREE[2], cells=[SELECTION[1], SELECTION[2]])
    assert merge(*dirs, "--out", tmp_path / "merged") == 2
    message = capsys.readouterr().err
    assert REFUSED[case] in message, message
    assert "Valid: " in message and "Fix: " in message
    assert not (tmp_path / "merged").exists(), "nothing is written for bad input"
