"""gather / gather_for_metrics / reduce / pad on 2 real CPU ranks, and sharding seen from them.

Expected values are computed here from the sharding rule (rank r takes block r of each global
batch of 2 x 4; a short last global batch wraps to the start), not read back from the core.

scripts/collectives_check.py runs as this module's part of the session's shared 2-rank launch
(shared_launch.py), before any DeepSpeed part; if the launch fails, every test here fails with
its output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.accelerate_core.shared_launch import LaunchPart, Scenario

pytestmark = [pytest.mark.ddp, pytest.mark.slow]


SCRIPT_MODULE = "tests.accelerate_core.scripts.collectives_check"
SHARED_LAUNCH = LaunchPart(
    scenarios=lambda out, fixtures: [Scenario("collectives", SCRIPT_MODULE, ("--out", str(out / "seen.pt")))],
    timeout=240, order=-1)  # DDP only: before the DeepSpeed parts


@pytest.fixture(scope="module")
def seen(shared_launch_out: Path) -> dict[str, Any]:
    result: dict[str, Any] = torch.load(shared_launch_out / "seen.pt", weights_only=False)
    return result


def test_gather_for_metrics_returns_37_samples_in_order(seen: dict[str, Any]) -> None:
    assert seen["num_processes"] == 2 and seen["strategy"] == "ddp"
    assert seen["len_37"] == 5  # ceil(37 / 8) steps on every rank
    assert seen["sequential_37"] == list(range(37))
    # Plain gather keeps the padding: the last global batch wraps to samples 0, 1, 2.
    assert seen["sequential_37_raw"] == [*range(37), 0, 1, 2]


def test_a_custom_sampler_drawing_per_rank_is_sharded_in_rank_zeros_order(seen: dict[str, Any]) -> None:
    # WeightedRandomSampler without a generator, each rank's global stream seeded apart: the
    # two ranks together see what one process with the global batch and rank 0's seed sees.
    assert len(seen["weighted_plain"]) == 37
    assert seen["weighted_prepared"] == seen["weighted_plain"]


def test_rank_zero_takes_the_first_block_of_each_global_batch(seen: dict[str, Any]) -> None:
    expected = [list(range(s, s + 4)) for s in range(0, 40, 8)]
    expected[-1] = [32, 33, 34, 35]
    assert seen["rank_batches"] == expected


def test_shuffled_loader_gives_the_plain_dataloaders_order_pass_after_pass(seen: dict[str, Any]) -> None:
    """Gathered over both ranks, each pass is the order the same DataLoader gives in plain PyTorch
    on one process in that pass; set_epoch(0) only relabels the epoch (a RandomSampler has no
    epoch: the third pass is the generator's third draw)."""
    plain = DataLoader(range(37), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(7))
    passes = [[int(i) for batch in plain for i in batch] for _ in range(3)]
    for key in ("shuffled_epoch0", "shuffled_epoch1", "shuffled_again_epoch0"):
        assert sorted(seen[key]) == list(range(37))
    assert seen["shuffled_epoch0"] == passes[0]
    assert seen["shuffled_epoch1"] == passes[1]
    assert seen["shuffled_again_epoch0"] == passes[2]
    assert len({tuple(p) for p in passes}) == 3


def test_dataset_smaller_than_one_global_batch(seen: dict[str, Any]) -> None:
    assert seen["tiny_3"] == [0, 1, 2]
    assert seen["tiny_3_raw"] == [0, 1, 2, 0, 1, 2, 0, 1]


def test_gather_of_a_nested_dataclass(seen: dict[str, Any]) -> None:
    out = seen["dataclass"]
    assert seen["dataclass_type"] == "Output"
    torch.testing.assert_close(out["loss"], torch.tensor([1.0, 2.0]))  # 0-dim gathers to [N]
    torch.testing.assert_close(out["logits"], torch.tensor([[0.0] * 3] * 2 + [[1.0] * 3] * 2))
    pair = out["extra"]["pair"]
    assert isinstance(pair, tuple) and isinstance(pair[1], list)
    assert pair[0].tolist() == [0, 1]
    assert pair[1][0].dtype == torch.bool and pair[1][0].tolist() == [True, True, True, False]
    assert out["extra"]["name"] == "x"
    assert seen["half"].dtype == torch.float16 and seen["half"].tolist() == [0.5, 1.5]


def test_reduce_and_pad(seen: dict[str, Any]) -> None:
    torch.testing.assert_close(seen["reduce_sum"], torch.tensor([3.0, 4.0]))
    torch.testing.assert_close(seen["reduce_mean"]["v"], torch.tensor([1.5]))
    assert seen["padded"].tolist() == [0, 1, -1, 0, 1, 2]
    assert seen["padded_first"].tolist() == [-1, 0, 1, 0, 1, 2]


def test_a_second_accelerator_reuses_the_process_group(seen: dict[str, Any]) -> None:
    assert seen["group_reused"] is True
    assert seen["second_type"] == "DistributedDataParallel"
    assert seen["second_gather"].tolist() == [0, 1]
