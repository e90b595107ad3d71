"""Nested-structure collectives in one process (world size 1): containers rebuilt, shapes kept."""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from accelerate_core import InvalidSettingError, ops
from accelerate_core.errors import UnsupportedObjectError

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


@pytest.mark.parametrize("collective", [ops.gather, ops.reduce, ops.pad_across_processes])
def test_an_object_the_walk_cannot_enter_is_refused_with_its_path_never_passed_through(
        collective: Any) -> None:
    """Passed through, its tensors would stay each process's own: on N processes the caller would
    read one process's predictions as the gathered ones. Refused on one process too, so a laptop
    run fails as the DDP run would."""
    output = SimpleNamespace(loss=torch.tensor(1.0), logits=torch.zeros(2, 3))
    with pytest.raises(UnsupportedObjectError) as raised:
        collective({"out": [output]})
    message = str(raised.value)
    name = collective.__name__
    assert message.startswith(f"accelerator.{name}: data['out'][0] is a types.SimpleNamespace: ")
    assert "Valid: a tensor, or those containers of tensors" in message and "Fix: " in message
    assert isinstance(raised.value, TypeError)  # as Hugging Face Accelerate raises for such an object


def test_plain_leaves_still_pass_and_send_to_device_still_passes_any_object() -> None:
    data = {"loss": None, "step": 3, "rate": 0.5, "flag": True, "name": "x", "raw": b"x",
            "logits": torch.zeros(2)}
    out = ops.gather(data)
    assert {k: v for k, v in out.items() if k != "logits"} == {k: v for k, v in data.items() if k != "logits"}
    carried = SimpleNamespace(note="kept")
    assert ops.send_to_device({"meta": carried}, torch.device("cpu"))["meta"] is carried


def test_gather_for_metrics_names_itself_in_the_error() -> None:
    refused = r"^accelerator\.gather_for_metrics: data is a builtins\.object"
    with pytest.raises(UnsupportedObjectError, match=refused):
        ops.gather(object(), caller="gather_for_metrics")
