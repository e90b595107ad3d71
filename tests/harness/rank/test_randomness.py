"""Evidence of random numbers drawn in training steps (harness.rank.randomness), in-process."""

from __future__ import annotations

import torch

from harness.rank.randomness import RandomDraws


def test_steps_that_draw_are_counted_and_the_epoch_boundary_is_not() -> None:
    draws = RandomDraws(torch.device("cpu"))
    dropout = torch.nn.Dropout(0.5)
    for step in range(4):
        draws.begin()
        x = torch.ones(8)
        if step % 2:
            x = dropout(x)  # a mask: draws from torch's CPU generator
    draws.end()  # end of an epoch
    torch.rand(3)  # e.g. the next epoch's loader iterator drawing its seed: outside any step
    draws.begin()
    torch.ones(2) * 2  # draws nothing
    assert draws.evidence() == {"steps": 5, "drawing": 2, "generators": "torch CPU generator"}


def test_a_step_that_draws_nothing_leaves_no_evidence() -> None:
    draws = RandomDraws(torch.device("cpu"))
    draws.begin()
    torch.nn.Dropout(0.5).eval()(torch.ones(4))  # eval mode: no mask
    assert draws.evidence() == {"steps": 1, "drawing": 0, "generators": ""}
