"""The dataclass <-> dict round trip that lets ZeRO-3 hook a dataclass output's tensors
(strategies/deepspeed/outputs.py). Pure torch: the ZeRO-3 run itself is in
test_deepspeed_reconcile.py. Here a stand-in for DeepSpeed's walk (the same in-place dict edit
and tuple/list rebuild as runtime/zero/utils.py:apply_to_tensors_only) replaces every tensor."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from accelerate_core.strategies.deepspeed.outputs import expose_dataclass_outputs, from_dicts, to_dicts


@dataclass(frozen=True)
class Inner:
    hidden: torch.Tensor
    note: str = "kept"


@dataclass
class Outer:
    loss: torch.Tensor
    parts: list[Any]
    inner: Inner
    derived: int = field(init=False, default=7)


Pair = namedtuple("Pair", ["left", "right"])


def walk(function: Any, value: Any) -> Any:
    """What DeepSpeed 0.19.8 does to a forward output (tuples, lists, dicts; nothing else)."""
    if isinstance(value, (tuple, list)):
        items = [walk(function, v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        for key in value:
            value[key] = walk(function, value[key])
        return value
    return function(value) if isinstance(value, torch.Tensor) else value


def sample() -> Outer:
    out = Outer(loss=torch.tensor(1.0), parts=[torch.ones(2), Pair(torch.zeros(1), Inner(torch.ones(3)))],
                inner=Inner(torch.full((2,), 2.0)))
    out.derived = 9  # an init=False field set after construction must survive
    return out


def test_round_trip_rebuilds_the_same_types_with_the_walked_tensors() -> None:
    original = sample()
    touched: list[torch.Tensor] = []

    def hook(tensor: torch.Tensor) -> torch.Tensor:
        touched.append(tensor)
        return tensor + 100

    rebuilt = from_dicts(walk(hook, to_dicts(original)))
    assert len(touched) == 5  # every tensor, at every depth, was visible to the walk
    assert type(rebuilt) is Outer and type(rebuilt.inner) is Inner and type(rebuilt.parts[1]) is Pair
    assert type(rebuilt.parts[1].right) is Inner and rebuilt.inner.note == "kept" and rebuilt.derived == 9
    assert torch.equal(rebuilt.loss, torch.tensor(101.0))
    assert torch.equal(rebuilt.parts[1].right.hidden, torch.full((3,), 101.0))
    assert torch.equal(original.loss, torch.tensor(1.0))  # the user's instance itself is untouched


def test_without_the_round_trip_the_walk_sees_no_tensor_of_a_dataclass() -> None:
    # The DeepSpeed limitation being reconciled: a dataclass is opaque to its walk.
    touched: list[torch.Tensor] = []
    walk(touched.append, sample())
    assert touched == []


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> Outer:
        y = self.lin(x)
        return Outer(loss=y.sum(), parts=[y], inner=Inner(y))


def test_hooks_around_a_middle_hook_that_sees_a_dict_and_gives_the_user_a_dataclass() -> None:
    model = Model()
    seen: list[type] = []

    def middle(module: nn.Module, args: Any, output: Any) -> Any:  # stands where DeepSpeed's hook runs
        seen.append(type(output))
        return walk(lambda t: t * 2, output)

    model.register_forward_hook(middle)
    handles = expose_dataclass_outputs(model)
    x = torch.ones(1, 2)
    out = model(x)
    assert seen and issubclass(seen[0], dict)
    assert type(out) is Outer and torch.allclose(out.loss, 2 * model.lin(x).sum())
    for handle in handles:
        handle.remove()
    seen.clear()
    assert type(model(x)) is Outer and seen == [Outer]  # removed: the output reaches the hook as is
