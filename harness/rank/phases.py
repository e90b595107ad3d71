"""Where a cell's time goes on rank 0: set-up, training, evaluation, teardown, saving.

`PhaseTimer.lap(name)` adds the time since the previous lap to `name`. The worker hands one to
each cell and writes the laps into the cell's `.finished` status file; the parent's profile
(`python -m harness run --profile`, harness/run/profile.py) adds them up over a run.
"""

from __future__ import annotations

import time


class PhaseTimer:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = round(self.seconds.get(phase, 0.0) + now - self._last, 6)
        self._last = now
