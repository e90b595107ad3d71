"""Running cells of one launch shape through as few launches as their failures allow: a cell that
raised, crashed or hung ends its launch, and the cells not yet run go on in a fresh one;
--isolate (or a caller's `one_per_launch`) gives each its own. The runner, the confirmation of
failures and the resume cells all launch through here, each with its own callbacks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.layout.launch_dir import LaunchDir
from harness.plan.cell import Cell
from harness.run.broken import broken_result
from harness.run.context import OnBroken, OnJudged, OnLaunch, RunContext
from harness.run.torchrun_launch import LaunchOutcome, run_launch

# Launches whose whole time is confirmation (harness.run.confirm), not start-up and cells.
CONFIRMING_LABELS = ("-rerun", "-alone")


def launch_cells(
    run: RunContext,
    key: str,
    cells: Sequence[Cell],
    records_dir: Path,
    on_judged: OnJudged,
    on_broken: OnBroken,
    label: str = "",
    on_launch: OnLaunch | None = None,
    one_per_launch: bool = False,
) -> None:
    """Run `cells` (one launch shape, `key`) until each finished or broke its launch.
    `on_launch(batch, launch_dir)` hears of each launch before it starts; a labelled launch
    (a rerun, a resume's half) does not report its cells' starts to the progress bar."""
    queue = list(cells)
    launch_no = 0
    by_id = {c.id: c for c in cells}
    while queue and not run.stopping:
        alone = run.options.isolate or one_per_launch
        batch = queue[:1] if alone else queue
        launch_no += 1
        launch_dir = run.layout.launch_dir(f"{key}{label}-{launch_no:03d}")
        while launch_dir.exists():  # an earlier run into this report dir (--resume): keep its evidence
            launch_no += 1
            launch_dir = run.layout.launch_dir(f"{key}{label}-{launch_no:03d}")
        if on_launch is not None:
            on_launch(batch, launch_dir)
        outcome = run_launch(
            batch,
            run.emulated,
            LaunchDir(launch_dir),
            records_dir,
            run.options.timeout_s,
            on_started=run.started if not label else lambda _id: None,
            on_finished=on_judged,
            should_stop=lambda: run.stopping,
        )
        run.launches.append({"launch": launch_dir.name, "cells": len(batch), "startup_s": outcome.startup_s,
                             "warm_up_s": outcome.warm_up.get("seconds"),
                             "deepspeed_ops_s": outcome.warm_up.get("deepspeed_ops_s"),
                             # what the run's floor is made of (docs/speed.md): each of the launch's
                             # processes holds a core for its start-up and its cells' set-up and training
                             "processes": batch[0].processes, "wall_s": round(outcome.wall_s, 3),
                             "cells_work_s": round(_cells_work(outcome), 3)})
        run.clock.add_launch(outcome, confirming=label in CONFIRMING_LABELS)
        if outcome.broken_cell is not None:
            cell = by_id[outcome.broken_cell]
            on_broken(cell, broken_result(cell, outcome, launch_dir, run.options.timeout_s,
                                          run.emulated.get(cell.id, False)))
        queue = queue[1:] if alone else outcome.not_started


def _cells_work(outcome: LaunchOutcome) -> float:
    """The launch's cells' set-up and training on rank 0: what no harness overhead can remove."""
    return sum(phases.get("setup", 0.0) + phases.get("training", 0.0) for phases in outcome.phases.values())
