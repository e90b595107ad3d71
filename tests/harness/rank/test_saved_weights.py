"""The record's final weights are the file accelerator.save wrote, read back
(harness.rank.saved_weights): what the user loop keeps, not the dict in memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from accelerate_core import Accelerator
from harness.rank.saved_weights import saved_and_read_back


def _prepared() -> tuple[Accelerator, dict[str, torch.Tensor]]:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(3, 2))
    return accelerator, accelerator.get_state_dict(model)


def test_what_the_core_saves_reads_back_bit_for_bit() -> None:
    accelerator, state_dict = _prepared()
    loaded = saved_and_read_back(accelerator, state_dict)
    assert loaded.keys() == state_dict.keys()
    for key, tensor in state_dict.items():
        assert loaded[key].dtype == tensor.dtype and torch.equal(loaded[key], tensor), key


def test_a_save_that_changes_the_weights_changes_the_record() -> None:
    """A save that writes the half-precision copy: the record holds bf16 tensors, which the
    comparison with an fp32 golden fails on dtype (the dict in memory was still fp32)."""
    accelerator, state_dict = _prepared()
    save = accelerator.save

    def save_in_bf16(obj: dict[str, torch.Tensor], path: Any) -> None:
        save({key: value.to(torch.bfloat16) for key, value in obj.items()}, path)

    accelerator.save = save_in_bf16  # type: ignore[method-assign]
    loaded = saved_and_read_back(accelerator, state_dict)
    assert {t.dtype for t in loaded.values()} == {torch.bfloat16}
    assert {t.dtype for t in state_dict.values()} == {torch.float32}


def test_a_save_that_writes_nothing_on_the_main_process_raises() -> None:
    accelerator, state_dict = _prepared()
    accelerator.save = lambda obj, path: None  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match=r"accelerator.save\(state_dict, .*model.pt'\) wrote no file"):
        saved_and_read_back(accelerator, state_dict)


def test_another_rank_calls_save_and_keeps_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    accelerator, state_dict = _prepared()
    paths: list[Path] = []
    monkeypatch.setattr(type(accelerator), "is_main_process", property(lambda self: False))
    accelerator.save = lambda obj, path: paths.append(Path(path))  # type: ignore[method-assign]
    assert saved_and_read_back(accelerator, state_dict) == {}
    assert len(paths) == 1 and paths[0].name == "model.pt"  # called, as the user loop calls it
