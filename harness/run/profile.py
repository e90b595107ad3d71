"""Where a run's time goes (`python -m harness run --profile`, and `environment.startup.profile`
in report.json): launch start-up, each cell's phases on rank 0 (set-up: the Accelerator,
prepare, the process group and deepspeed.initialize; training; evaluation: evidence, gathered
outputs, the consolidated state dict; teardown; saving the record; the collector), the
parent's judging, the relaunches that confirm failures, and what is left of each launch's wall
time (shutdown of its processes, polling). Launch shapes run at the same time (two CPU launches
on two cores), so the parts add up to the launches' summed wall time, not to the run's wall
clock, which is reported beside them.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol

CELL_PHASES = ("setup", "training", "evaluation", "teardown", "save", "collector")


class LaunchTimes(Protocol):
    """What a finished launch measured (harness.run.torchrun_launch.LaunchOutcome)."""

    startup_s: float | None
    finished: dict[str, float]
    phases: dict[str, dict[str, float]]
    wall_s: float


@dataclass
class RunClock:
    started: float = field(default_factory=time.monotonic)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    cells: int = 0
    launches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)  # launch threads add at once

    def add(self, part: str, seconds: float) -> None:
        with self.lock:
            self.seconds[part] += seconds

    def add_launch(self, outcome: LaunchTimes, confirming: bool) -> None:
        """One launch's time: all of it is confirmation when it reran failing cells, else its
        start-up, its cells' phases and the rest of its wall time."""
        with self.lock:
            self.launches += 1
            if confirming:
                self.seconds["confirmations"] += outcome.wall_s
                return
            startup = outcome.startup_s or 0.0
            cells = sum(outcome.finished.values())
            self.seconds["launch start-up"] += startup
            self.cells += len(outcome.finished)
            for phases in outcome.phases.values():
                for phase in CELL_PHASES:
                    self.seconds[f"cell {phase}"] += phases.get(phase, 0.0)
            self.seconds["launch shutdown and waiting"] += max(0.0, outcome.wall_s - startup - cells)

    def summary(self) -> dict[str, object]:
        with self.lock:
            # Microseconds, as the ranks measure their phases (harness/rank/phases.py): a phase of
            # a fast machine (the collector after gc.freeze: well under a millisecond per cell)
            # must not read as 0 s, i.e. as never measured.
            parts = {name: round(value, 6) for name, value in self.seconds.items()}
        return {"wall_s": round(time.monotonic() - self.started, 3), "launches": self.launches,
                "cells": self.cells, "seconds": parts}


def profile_lines(profile: dict[str, object] | None) -> list[str]:
    """The profile as a table for the terminal: seconds and share of the parts' sum."""
    recorded = (profile or {}).get("seconds")
    if not profile or not isinstance(recorded, dict):
        return []
    parts = {str(name): float(value) for name, value in recorded.items()}
    total = sum(parts.values()) or 1.0
    lines = [f"where the time went: {profile.get('wall_s')} s of wall clock, {profile.get('launches')} "
             f"launch(es), {profile.get('cells')} cell(s); launches run side by side, so the parts "
             f"add up to {total:.1f} s"]
    order = ["launch start-up", *(f"cell {p}" for p in CELL_PHASES), "judging", "confirmations",
             "launch shutdown and waiting"]
    for name in [*order, *sorted(set(parts) - set(order))]:
        if name in parts:
            lines.append(f"  {parts[name]:8.2f} s  {100 * parts[name] / total:5.1f}%  {name}")
    return lines


def profile_report(profile: dict[str, object] | None, per_launch: list[dict[str, object]],
                   cores: int) -> list[str]:
    """--profile's output: the profile, then the run's floor (harness.run.floor) when the
    launches recorded what it is made of."""
    from harness.run.floor import run_floor

    lines = profile_lines(profile)
    if not lines:
        return ["no profile: no launch ran"]
    floor = run_floor(per_launch, cores)
    if floor is not None and profile is not None:
        lines.append(floor.line(float(str(profile.get("wall_s", 0.0)))))
    return lines
