"""The floor of a run: the time its cells' irreducible work needs on this machine's cores.

What no harness overhead can remove is each launch's start-up and its cells' set-up and training
(the Accelerator, `prepare`, the user loop). Each process of a launch holds a core while it does
that work (a 2-process cell's second is two core-seconds: measured, two concurrent 2-process
launches of half the cells each take as long as one launch of all of them, docs/speed.md), so
the floor is the larger of:

- the core-seconds of that work over all launches, divided by the cores that run them side by
  side (the work cannot be done faster than the cores do it), and
- the longest launch's own start-up plus its cells' work (one launch's cells run one after the
  other: no spare core shortens it).

Everything else in a run's wall clock (evaluation, evidence, teardown, saving, judging, waiting
for a straggler launch) is the harness's own cost, which the run's ratio to its floor measures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Floor:
    seconds: float
    core_seconds: float  # the work, summed over every process of every launch
    cores: int
    longest_launch_s: float  # one launch's start-up plus its cells' work
    launches: int

    def ratio(self, wall_s: float) -> float:
        return wall_s / self.seconds if self.seconds else float("nan")

    def line(self, wall_s: float) -> str:
        bound = "the cores" if self.seconds > self.longest_launch_s else "the longest launch"
        return (f"floor: {self.seconds:.1f} s, set by {bound} ({self.core_seconds:.1f} core-seconds of "
                f"start-up, set-up and training over {self.cores} core(s); longest launch "
                f"{self.longest_launch_s:.1f} s); run wall {wall_s:.1f} s = "
                f"{self.ratio(wall_s):.2f}x the floor")


def run_floor(per_launch: Iterable[Mapping[str, object]], cores: int) -> Floor | None:
    """From report.json's `environment.startup.per_launch`: None when no entry says its cells'
    work (a report written before the launches recorded it)."""
    launches = [entry for entry in per_launch if "cells_work_s" in entry]
    if not launches:
        return None
    own = [float(str(e.get("startup_s") or 0.0)) + float(str(e["cells_work_s"])) for e in launches]
    processes = [int(str(e.get("processes") or 1)) for e in launches]
    core_seconds = sum(seconds * n for seconds, n in zip(own, processes, strict=True))
    cores = max(1, cores)
    return Floor(seconds=max(core_seconds / cores, max(own)), core_seconds=core_seconds, cores=cores,
                 longest_launch_s=max(own), launches=len(launches))
