"""The order of cells inside a launch group (harness.run.schedule): a cell declared to raise,
crash or time out ends its launch, so it goes after every other cell of its group."""

from __future__ import annotations

from pathlib import Path

from harness.plan.availability import Host
from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.run.context import RunContext
from harness.run.options import RunOptions
from harness.run.schedule import schedule

HOST = Host(cuda_devices=0, cpu_cores=2, deepspeed=True, cpu_native_fp16=False)


def test_cells_declared_to_end_their_launch_come_after_those_declared_to_diverge(tmp_path: Path) -> None:
    matrix = load_matrix()
    run = RunContext(options=RunOptions(tmp_path, env_name="deepspeed"), matrix=matrix, progress=None)
    requested = ["scalar-cpu2-fsdp-fp32", "batchnorm-cpu2-ddp-fp32", "regression-cpu2-ddp-fp32",
                 "scalar-cpu2-fsdp-bf16", "dropout-cpu2-ddp-fp32", "regression-cpu2-zero3-fp32"]
    statuses = {i: getattr(matrix.expected_outcome(Cell.from_id(i), "deepspeed"), "status", None)
                for i in requested}
    # What the ordering rests on, read from matrix.toml rather than assumed.
    assert statuses == {"scalar-cpu2-fsdp-fp32": "exception", "batchnorm-cpu2-ddp-fp32": "failed",
                        "regression-cpu2-ddp-fp32": None, "scalar-cpu2-fsdp-bf16": "exception",
                        "dropout-cpu2-ddp-fp32": "failed", "regression-cpu2-zero3-fp32": None}
    plan = schedule(run, [Cell.from_id(i) for i in requested], HOST)
    assert [c.id for c in plan.groups["cpu2"]] == [
        "regression-cpu2-ddp-fp32", "regression-cpu2-zero3-fp32",  # expected to pass, in the given order
        "batchnorm-cpu2-ddp-fp32", "dropout-cpu2-ddp-fp32",  # declared divergences: the launch goes on
        "scalar-cpu2-fsdp-fp32", "scalar-cpu2-fsdp-bf16",  # declared exceptions: each ends its launch
    ]
