"""Collectives and sharding on real ranks; rank 0 saves what it saw to --out (torch.save).

The test (test_collectives_ddp.py) asserts on the saved values; this script only records them,
so a wrong value is reported by the test with the expected value beside it.

`main(argv)` is also what scripts/scenarios.py calls: the tests run these checks as their part
of the session's shared 2-rank launch (tests/accelerate_core/shared_launch.py).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from accelerate_core import Accelerator


class Indexed(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"index": torch.tensor(i), "value": torch.tensor([float(i), -float(i)])}


@dataclass
class Output:
    loss: torch.Tensor
    logits: torch.Tensor
    extra: dict[str, Any]


def indices_for_metrics(accelerator: Accelerator, loader: Any) -> tuple[list[int], list[int]]:
    kept, raw = [], []
    for batch in loader:
        raw += accelerator.gather(batch["index"]).tolist()
        kept += accelerator.gather_for_metrics(batch)["index"].tolist()
    return kept, raw


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    acc = Accelerator(cpu=True)
    rank = acc.process_index
    seen: dict[str, Any] = {"num_processes": acc.num_processes, "strategy": acc.strategy.name}

    seq = acc.prepare(DataLoader(Indexed(37), batch_size=4))
    seen["len_37"] = len(seq)
    seen["sequential_37"], seen["sequential_37_raw"] = indices_for_metrics(acc, seq)
    shuffled = acc.prepare(
        DataLoader(Indexed(37), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7))
    )
    seen["shuffled_epoch0"], _ = indices_for_metrics(acc, shuffled)
    seen["shuffled_epoch1"], _ = indices_for_metrics(acc, shuffled)  # epoch advances by itself
    shuffled.set_epoch(0)
    seen["shuffled_again_epoch0"], _ = indices_for_metrics(acc, shuffled)
    # A custom sampler drawing from the global random stream, seeded per rank (as a seed offset by
    # rank leaves it): one process with the global batch and rank 0's stream is the reference.
    weights = torch.linspace(0.2, 1.0, 37)
    torch.manual_seed(100)
    plain = DataLoader(Indexed(37), batch_size=8, sampler=WeightedRandomSampler(weights, 37))
    seen["weighted_plain"] = [i for batch in plain for i in batch["index"].tolist()]
    torch.manual_seed(100 + rank)
    weighted = acc.prepare(DataLoader(Indexed(37), batch_size=4, sampler=WeightedRandomSampler(weights, 37)))
    seen["weighted_prepared"], _ = indices_for_metrics(acc, weighted)
    tiny = acc.prepare(DataLoader(Indexed(3), batch_size=4))
    seen["tiny_3"], seen["tiny_3_raw"] = indices_for_metrics(acc, tiny)
    seen["rank_batches"] = [b["index"].tolist() for b in seq]  # this rank's own blocks

    out = Output(
        loss=torch.tensor(float(rank + 1)),
        logits=torch.full((2, 3), float(rank)),
        extra={"pair": (torch.tensor([rank]), [torch.tensor([True, rank == 0])]), "name": "x"},
    )
    gathered = acc.gather(out)
    # The dataclass type lives in __main__ here; keep its name and fields for the test.
    seen["dataclass_type"] = type(gathered).__name__
    seen["dataclass"] = dict(vars(gathered))
    seen["half"] = acc.gather(torch.tensor([rank + 0.5], dtype=torch.float16))
    seen["reduce_sum"] = acc.reduce(torch.tensor([rank + 1.0, 2.0]), "sum")
    seen["reduce_mean"] = acc.reduce({"v": torch.tensor([rank + 1.0])}, "mean")
    ragged = torch.arange(rank + 2)  # rank 0: 2 rows, rank 1: 3 rows
    seen["padded"] = acc.gather(acc.pad_across_processes(ragged, pad_index=-1))
    seen["padded_first"] = acc.gather(acc.pad_across_processes(ragged, pad_index=-1, pad_first=True))

    # Harness reuse: a second Accelerator in the same launch reuses the process group.
    group = dist.group.WORLD
    acc.free_memory()
    second = Accelerator(cpu=True)
    model = second.prepare(torch.nn.Linear(2, 1))
    seen["group_reused"] = dist.is_initialized() and dist.group.WORLD is group
    seen["second_type"] = type(model).__name__
    seen["second_gather"] = second.gather(torch.tensor([rank]))
    second.free_memory()
    if acc.is_main_process:
        torch.save(seen, args.out)
    second.wait_for_everyone()


if __name__ == "__main__":
    main()
