"""The behaviour probe's launch: a reproduction that hangs ends at the timeout, with every rank
killed and the reason in the table, never a sweep stuck for good."""

from __future__ import annotations

import threading

from harness.run.processes import kill_tree
from harness.versions.behaviours import BEHAVIOURS
from harness.versions.probe import run_probe
from tests.harness.runner_helpers import processes_mentioning

HANGING = "tests.harness.scripts.hanging_rank"


def test_a_hanging_reproduction_is_killed_at_the_timeout_with_its_ranks() -> None:
    outcome: list[object] = []
    probe = threading.Thread(target=lambda: outcome.append(run_probe(timeout_s=8.0, rank_program=HANGING)),
                             daemon=True)
    probe.start()
    probe.join(timeout=120)  # a probe that waits for its ranks would wait an hour
    leftovers = processes_mentioning(HANGING)
    for proc in leftovers:  # never leave them behind, even when the check fails
        kill_tree(proc.pid)
    assert not probe.is_alive(), "run_probe did not return after its timeout"
    assert leftovers == []
    results, why = outcome[0]  # type: ignore[misc]
    assert why.startswith("the probe launch ran past 8 s")
    assert [r.verdict for r in results] == ["not run"] * len(BEHAVIOURS)
