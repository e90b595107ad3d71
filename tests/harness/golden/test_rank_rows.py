"""Synchronised BatchNorm on two ranks imitated in one process (harness.golden.rank_rows, the
two_ranks_sync_batchnorm variant): each rank's rows through their own matmul, BatchNorm over the
whole batch."""

from __future__ import annotations

import torch
from torch import nn

from harness.golden.golden_store import load_golden
from harness.golden.rank_rows import linear_rows_per_rank
from harness.golden.reference import Perturbation, train_reference
from harness.tasks import get_task

SYNC = Perturbation(splits=2, sync_batchnorm=True, name="two_ranks_sync_batchnorm")


def test_each_ranks_rows_go_through_a_matmul_of_their_own_and_the_layer_is_restored() -> None:
    torch.manual_seed(0)
    layer, rows = nn.Linear(5, 3), torch.randn(6, 5)
    with torch.no_grad():
        with linear_rows_per_rank(layer, 2):
            split = layer(rows)
        whole = layer(rows)
        expected = torch.cat([nn.functional.linear(part, layer.weight, layer.bias) for part in rows.chunk(2)])
    assert torch.equal(split, expected)
    assert "forward" not in vars(layer)  # the instance's own forward is gone: the class's again
    torch.testing.assert_close(whole, split)


def test_batchnorm_sees_the_whole_batch_where_a_plain_split_would_see_each_half() -> None:
    task = get_task("batchnorm")
    golden = load_golden("batchnorm", "fp32")
    synchronised = train_reference(task, "fp32", perturbation=SYNC)
    halves = train_reference(task, "fp32", perturbation=Perturbation(splits=2, name="two_ranks"))
    # The first loss comes before any step: only the statistics BatchNorm used can move it.
    assert abs(synchronised.losses[0] - golden.losses[0]) < 1e-6
    assert abs(halves.losses[0] - golden.losses[0]) > 1e-3
    assert synchronised.losses != golden.losses or not torch.equal(
        synchronised.eval_outputs["logits"], golden.eval_outputs["logits"])  # other bits: it perturbs
