"""The harness process seeds torch's global RNG from several threads (the runner's judges, the
resume grid's reference): each must get the numbers it seeded for."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from harness.golden.golden_store import load_golden
from harness.golden.reference import train_reference
from harness.tasks import get_task

# Reads the goldens: run again against goldens made elsewhere (nox -s foreign_goldens).
pytestmark = pytest.mark.goldens

TASKS = ["batchnorm", "lm", "classifier", "regression"]


def test_goldens_load_from_parallel_judges() -> None:
    # Before the lock, 15 of 400 initial-weight hashes from 4 threads were wrong: a GoldenError.
    def load(i: int) -> str:
        return load_golden(TASKS[i % len(TASKS)], "fp32").task

    with ThreadPoolExecutor(max_workers=4) as pool:
        loaded = list(pool.map(load, range(200)))
    assert loaded == [TASKS[i % len(TASKS)] for i in range(200)]


def test_the_reference_draws_its_own_dropout_masks_while_judges_build_models() -> None:
    task = get_task("dropout")
    alone = train_reference(task, "fp32")

    def judge(i: int) -> None:
        load_golden(TASKS[i % len(TASKS)], "fp32")

    with ThreadPoolExecutor(max_workers=4) as pool:
        reference = pool.submit(train_reference, task, "fp32")
        list(pool.map(judge, range(100)))
        beside_judges = reference.result()
    assert beside_judges.losses == alone.losses
    assert all(torch.equal(beside_judges.state_dict[k], alone.state_dict[k]) for k in alone.state_dict)
