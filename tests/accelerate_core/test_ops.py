"""Nested-structure collectives in one process (world size 1): containers rebuilt, shapes kept."""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from dataclasses import dataclass, field

import pytest
import torch

from accelerate_core import InvalidSettingError, ops

Pair = namedtuple("Pair", ["a", "b"])


@dataclass(frozen=True)
class Frozen:
    x: torch.Tensor
    note: str = "n"
    derived: int = field(default=0, init=False)


def test_gather_rebuilds_containers_and_reshapes_scalars() -> None:
    data = OrderedDict(p=Pair(torch.tensor(2.0), [torch.ones(2, 2)]), f=Frozen(torch.arange(3)), s="text")
    out = ops.gather(data)
    assert isinstance(out, OrderedDict) and isinstance(out["p"], Pair) and isinstance(out["f"], Frozen)
    assert out["p"].a.shape == (1,)  # a 0-dim tensor gathers to [world_size]
    assert out["p"].b[0].shape == (2, 2) and out["f"].x.tolist() == [0, 1, 2]
    assert out["f"].note == "n" and out["s"] == "text"


def test_send_to_device_and_detach() -> None:
    x = torch.ones(2, requires_grad=True)
    moved = ops.send_to_device({"x": [x]}, torch.device("cpu"))
    assert moved["x"][0] is x  # already there: nothing copied
    assert not ops.gather(x * 2).requires_grad


def test_reduce_one_process_and_bad_reduction() -> None:
    assert ops.reduce(torch.tensor([2.0]), "sum").tolist() == [2.0]
    assert ops.reduce(torch.tensor([2.0]), "mean").tolist() == [2.0]
    with pytest.raises(InvalidSettingError, match="'max'"):
        ops.reduce(torch.tensor([1.0]), "max")


def test_truncate_only_per_sample_leaves() -> None:
    data = {"logits": torch.zeros(8, 3), "loss": torch.zeros(2)}
    out = ops.truncate(data, full_length=8, keep=5)
    assert out["logits"].shape == (5, 3) and out["loss"].shape == (2,)
