"""What a run returns: every requested cell's result and the run's start-up and profile, handed
to the caller as objects (the CLI writes them into the report; nothing is read back from disk)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.judge.outcome import CellResult
from harness.run.startup import StartupSummary


@dataclass
class RunOutcome:
    results: list[CellResult]  # one per requested cell, in the order given (finished ones only
    # when interrupted)
    startup: StartupSummary | None  # None when no launch ran (every cell skipped or kept)


class RunInterrupted(Exception):
    """SIGINT/SIGTERM during a run: every launch was stopped; `results` holds the finished cells,
    `outcome` them and the start-up of the launches that ran (for the partial report)."""

    def __init__(self, outcome: RunOutcome, signal_name: str = "SIGINT") -> None:
        super().__init__(f"run interrupted by {signal_name}; {len(outcome.results)} cell(s) finished")
        self.outcome = outcome
        self.results = outcome.results
        self.signal_name = signal_name
