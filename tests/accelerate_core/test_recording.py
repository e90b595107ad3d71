"""accelerate_core.recording: with ACCELERATE_CORE_RECORD_DIR set, a script's own Accelerator
records what the script computed (the loss at each backward, the learning rates then, every
gathered tensor by the line that gathered it, the last consolidated state dict, what ran);
without it, nothing. One process, in-process: the multi-process path is exercised by
tests/harness/script/ through the launcher."""

from __future__ import annotations

import atexit
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelerate_core.observers as observers
import accelerate_core.recording as recording
from accelerate_core import Accelerator


@pytest.fixture
def fresh_recorder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setattr(recording, "_recorder", None)
    monkeypatch.setenv(recording.RECORD_DIR_VARIABLE, str(tmp_path / "record"))
    yield tmp_path / "record"
    if recording._recorder is not None:  # the test wrote it; no second write at exit, no more watching
        atexit.unregister(recording._recorder.write)
        observers.unregister(recording._recorder)


def _loop(accelerator: Accelerator) -> dict[str, object]:
    """A small user loop; returns what the script itself saw, to check the record against."""
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    inputs = torch.randn(12, 3, generator=torch.Generator().manual_seed(1))
    targets = inputs[:, :2].sum(dim=1, keepdim=True).repeat(1, 2)
    train = DataLoader(TensorDataset(inputs, targets), batch_size=4)
    evaluation = DataLoader(TensorDataset(inputs[:10]), batch_size=4)  # 4 + 4 + 2
    model, optimizer, train, evaluation = accelerator.prepare(model, optimizer, train, evaluation)
    seen: dict[str, list] = {"losses": [], "lrs": [], "outputs": []}
    for step, (x, y) in enumerate(train):
        loss = nn.functional.mse_loss(model(x), y) / 2
        seen["losses"].append(loss.item())
        seen["lrs"].append([optimizer.param_groups[0]["lr"]])
        accelerator.backward(loss)
        if step % 2 == 1 or step == len(train) - 1:
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()
    with torch.no_grad():
        for (x,) in evaluation:
            seen["outputs"].append(accelerator.gather_for_metrics(model(x)))  # the line recorded
    seen["state_dict"] = {k: v.clone() for k, v in accelerator.get_state_dict(model).items()}
    return seen


def test_the_accelerator_records_what_the_script_computed(fresh_recorder: Path) -> None:
    accelerator = Accelerator(cpu=True)
    seen = _loop(accelerator)
    assert recording._recorder in observers.registered()  # it records through the observer interface
    path = recording._recorder.write() if recording._recorder is not None else None
    assert path == fresh_recorder / recording.RECORD_FILE
    body = torch.load(path, weights_only=True)
    assert body["format"] == recording.RECORD_FORMAT
    assert body["losses"].tolist() == pytest.approx(seen["losses"], rel=0, abs=0)
    assert [lr.tolist() for lr in body["lrs"]] == seen["lrs"] == [[0.1], [0.1], [0.05]]
    [(site, gathered)] = body["gathered"].items()
    assert site.startswith("test_recording.py:")  # the script's line, not the core's
    torch.testing.assert_close(gathered, torch.cat(seen["outputs"]), rtol=0, atol=0)
    assert gathered.shape == (10, 2)
    assert body["state_dict"].keys() == seen["state_dict"].keys()
    for key, value in seen["state_dict"].items():
        assert torch.equal(body["state_dict"][key], value)
    assert json.loads(body["evidence"]) == {"strategy": "single", "world_size": 1, "device": "cpu",
                                            "mixed_precision": "no", "zero_stage": None,
                                            "loss_scaling": False, "emulated": False,
                                            "computed_dtypes": ["float32"]}


# fp16: when the GradScaler skips the first optimizer step, the loop steps its scheduler anyway,
# which torch warns of; the dtypes are what this test is about.
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before `optimizer.step\\(\\)`")
@pytest.mark.parametrize(("mixed_precision", "half"), [("bf16", "bfloat16"), ("fp16", "float16")])
def test_the_dtypes_the_model_computed_in_are_read_from_its_forward(
        fresh_recorder: Path, monkeypatch: pytest.MonkeyPatch, mixed_precision: str, half: str) -> None:
    """What ran, not what was asked: the Linear's output under autocast is half; with autocast
    switched off behind the precision object's back, the precision still says so, the dtypes not."""
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision)
    _loop(accelerator)
    assert recording._recorder is not None
    evidence = json.loads(torch.load(recording._recorder.write(), weights_only=True)["evidence"])
    assert evidence["mixed_precision"] == mixed_precision and half in evidence["computed_dtypes"]

    atexit.unregister(recording._recorder.write)
    observers.unregister(recording._recorder)
    monkeypatch.setattr(recording, "_recorder", None)
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision)
    monkeypatch.setattr(type(accelerator.strategy.precision), "uses_autocast", property(lambda self: False))
    _loop(accelerator)
    assert recording._recorder is not None
    evidence = json.loads(torch.load(recording._recorder.write(), weights_only=True)["evidence"])
    assert evidence["mixed_precision"] == mixed_precision and evidence["computed_dtypes"] == ["float32"]


def test_nothing_is_recorded_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "_recorder", None)
    monkeypatch.delenv(recording.RECORD_DIR_VARIABLE, raising=False)
    accelerator = Accelerator(cpu=True)
    _loop(accelerator)
    assert recording._recorder is None
    assert not any(isinstance(o, recording.Recorder) for o in observers.registered())
