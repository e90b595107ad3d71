"""LaunchDir and ReportDir on a real folder: what the parent finds of what a rank wrote, and the
report folder's records, checkpoints and launch directories."""

from __future__ import annotations

from pathlib import Path

from harness.layout.launch_dir import LaunchDir
from harness.layout.report_dir import ReportDir


def test_the_parent_finds_each_ranks_files(tmp_path: Path) -> None:
    launch = LaunchDir(tmp_path / "launches" / "cpu2-001")
    launch.create()
    launch.write_plan({"cells": [], "records_dir": "r"})
    assert launch.read_plan() == {"cells": [], "records_dir": "r"}
    for rank in (0, 1):
        launch.pid_file(rank).write_text(str(100 + rank))
        launch.log(rank).write_text(f"output of {rank}")
        launch.stack(rank).write_text("")
    launch.error("a-cpu2-ddp-fp32", 1).write_text("Traceback ...")
    launch.error("a-cpu2-ddp-fp32-other", 0).write_text("another cell's")  # an id that extends this one
    assert [LaunchDir.rank_of(p) for p in launch.logs()] == [0, 1]
    assert [LaunchDir.rank_of(p) for p in launch.stacks()] == [0, 1]
    assert [p.read_text() for p in launch.pid_files()] == ["100", "101"]
    assert launch.errors("a-cpu2-ddp-fp32") == {1: launch.error("a-cpu2-ddp-fp32", 1)}
    assert not launch.started("a-cpu2-ddp-fp32").exists() and launch.warm_up.parent == launch.status


def test_records_checkpoints_and_launches_of_a_report_dir(tmp_path: Path) -> None:
    report = ReportDir(tmp_path)
    report.records.mkdir()
    for suffix in (".json", ".safetensors"):
        report.record("a").with_name("a" + suffix).write_text("{}")
        report.record("b").with_name("b" + suffix).write_text("{}")
    ReportDir.forget_records(report.records, ["a", "never-written"])
    assert sorted(p.name for p in report.records.iterdir()) == ["b.json", "b.safetensors"]
    # A rank knows only where its records go: the checkpoints are found beside them.
    assert ReportDir.checkpoints_beside(report.records) == tmp_path / "checkpoints"
    assert ReportDir.checkpoints_beside(report.rerun_records).parent == report.rerun_records.parent
    assert report.launch_dir("cpu1-rerun-001").parent.parent == report.root
    assert [report.root / name for name in ReportDir.REPORTS] == [
        report.report_json, report.root / ReportDir.JUNIT_XML, report.report_md, report.report_html]
