"""The facade in one process (no launcher): the user loop, prepare, fp16 skipping, saving."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accelerate_core import Accelerator
from accelerate_core.optimizer import AcceleratedOptimizer, AcceleratedScheduler
from tests.accelerate_core.scripts import mission_loop
from tests.accelerate_core.scripts.plain_reference import train_reference
from tests.accelerate_core.scripts.task import Classifier, TaskConfig

# Touches numerics or fp16 detection: nox's older-CPU pass runs it again (marker `numerics`).
pytestmark = pytest.mark.numerics


def test_mission_loop_one_process_equals_plain_pytorch(tmp_path: Path) -> None:
    mission_loop.main(["--cpu", "--out", str(tmp_path)])
    record = torch.load(tmp_path / "record.pt", weights_only=False)
    reference = train_reference(TaskConfig(world_size=1))
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    for key, value in reference["state_dict"].items():
        torch.testing.assert_close(state[key], value, rtol=1.3e-6, atol=1e-5)
    assert record["losses"] == pytest.approx(reference["losses"], rel=1.3e-6, abs=1e-5)
    assert record["metric_predictions"].shape == (37, 4)


@pytest.mark.fp16
def test_mission_loop_fp16_overflow_one_process(tmp_path: Path) -> None:
    mission_loop.main(
        ["--cpu", "--out", str(tmp_path), "--mixed-precision", "fp16", "--inject-overflow-step", "1"]
    )
    record = torch.load(tmp_path / "record.pt", weights_only=False)
    reference = train_reference(TaskConfig(world_size=1, mixed_precision="fp16", inject_overflow_step=1))
    assert (
        [i for i, s in enumerate(record["skipped"]) if s]
        == [1]
        == [i for i, s in enumerate(reference["skipped"]) if s]
    )
    assert torch.equal(record["params"][1], record["params"][0])
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    for key, value in reference["state_dict"].items():
        torch.testing.assert_close(state[key], value, rtol=0, atol=1e-2)


def _objects() -> tuple[
    torch.nn.Module,
    torch.optim.Optimizer,
    DataLoader[tuple[torch.Tensor, ...]],
    torch.optim.lr_scheduler.LRScheduler,
]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    return model, optimizer, loader, scheduler


def test_prepare_keeps_the_order_given() -> None:
    accelerator = Accelerator(cpu=True)
    model, optimizer, loader, scheduler = _objects()
    out = accelerator.prepare(scheduler, loader, optimizer, model)
    assert isinstance(out[0], AcceleratedScheduler) and isinstance(out[2], AcceleratedOptimizer)
    assert out[1].batch_size == 2 and len(out[1]) == 4
    assert out[3] is model  # single device: the user's own module
    assert (
        accelerator.prepare(torch.nn.Linear(1, 1)).__class__ is torch.nn.Linear
    )  # one object comes back alone


@pytest.mark.fp16
def test_skipped_step_keeps_weights_and_scheduler() -> None:
    accelerator = Accelerator(fp16=True, cpu=True)
    model, optimizer, _, scheduler = _objects()
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    before = [p.detach().clone() for p in model.parameters()]
    accelerator.backward(model(torch.randn(2, 4)).float().mean() * float("inf"))
    optimizer.step()
    assert optimizer.is_overflow and optimizer.step_was_skipped
    scheduler.step()  # the prepared scheduler refuses to advance after a skipped step
    assert scheduler.last_epoch == 0 and optimizer.param_groups[0]["lr"] == 0.1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    optimizer.zero_grad()
    accelerator.backward(model(torch.randn(2, 4)).float().mean())
    optimizer.step()
    scheduler.step()
    assert not optimizer.is_overflow
    assert scheduler.last_epoch == 1 and optimizer.param_groups[0]["lr"] == 0.05
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.fp16
def test_clip_grad_norm_unscales_first() -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 4)
    reference = torch.nn.Linear(4, 2)
    model = torch.nn.Linear(4, 2)
    model.load_state_dict(reference.state_dict())
    with torch.autocast("cpu", dtype=torch.float16):
        reference(x).float().pow(2).mean().backward()
    expected = torch.linalg.vector_norm(
        torch.stack([p.grad.norm() for p in reference.parameters() if p.grad is not None])
    )
    accelerator = Accelerator(fp16=True, cpu=True)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.backward(model(x).float().pow(2).mean())
    assert accelerator.precision.loss_scale == 65536.0
    norm = accelerator.clip_grad_norm_(model.parameters(), max_norm=1e9)
    torch.testing.assert_close(norm, expected, rtol=1e-3, atol=1e-5)  # not 65536 times larger
    accelerator.clip_grad_norm_(model.parameters(), max_norm=1e9)  # a second call is allowed
    optimizer.step()
    assert not optimizer.is_overflow


@pytest.mark.bf16
def test_prepared_forward_runs_under_autocast_until_freed() -> None:
    accelerator = Accelerator(mixed_precision="bf16", cpu=True)
    model = accelerator.prepare(torch.nn.Linear(4, 2))
    assert model(torch.randn(1, 4)).dtype == torch.bfloat16
    with accelerator.autocast():
        assert (torch.randn(2, 2) @ torch.randn(2, 2)).dtype == torch.bfloat16
    accelerator.free_memory()
    assert model(torch.randn(1, 4)).dtype == torch.float32
    assert "forward" not in model.__dict__


def test_save_is_atomic_and_state_dict_is_a_cpu_copy(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(Classifier())
    state = accelerator.get_state_dict(model)
    state["net.0.weight"].zero_()
    assert model.net[0].weight.abs().sum() > 0  # a copy, not the live tensors
    target = tmp_path / "sub" / "model.pt"
    accelerator.save(accelerator.get_state_dict(model), target)
    assert [p.name for p in target.parent.iterdir()] == ["model.pt"]  # no temporary left
    fresh = Classifier()
    fresh.load_state_dict(torch.load(target, weights_only=True))
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), model.parameters(), strict=True))


def test_save_state_restores_rng_and_optimizer(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    model, optimizer, _, scheduler = _objects()
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    accelerator.backward(model(torch.randn(2, 4)).sum())
    optimizer.step()
    scheduler.step()
    accelerator.save_state(tmp_path)
    weights = [p.detach().clone() for p in model.parameters()]
    draw = torch.rand(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    scheduler.step()
    accelerator.load_state(tmp_path)
    assert torch.equal(torch.rand(3), draw)
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    assert scheduler.last_epoch == 1


def test_process_properties(capsys: pytest.CaptureFixture[str]) -> None:
    accelerator = Accelerator(cpu=True)
    assert (accelerator.num_processes, accelerator.process_index, accelerator.is_main_process) == (1, 0, True)
    assert accelerator.strategy.name == "single" and accelerator.mixed_precision == "no"
    accelerator.print("hello")
    assert capsys.readouterr().out == "hello\n"
    accelerator.wait_for_everyone()  # no process group: a no-op


@pytest.mark.fp16
def test_scheduler_built_on_the_prepared_optimizer_also_skips() -> None:
    accelerator = Accelerator(fp16=True, cpu=True)
    _other_model, other = accelerator.prepare(
        torch.nn.Linear(4, 2), torch.optim.SGD(torch.nn.Linear(4, 2).parameters())
    )
    model = torch.nn.Linear(4, 2)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    scheduler = accelerator.prepare(torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5))
    assert scheduler.optimizers == [optimizer]  # matched to its own optimizer, not `other`
    accelerator.backward(model(torch.randn(2, 4)).float().mean() * float("inf"))
    optimizer.step()
    scheduler.step()
    assert optimizer.is_overflow and not other.is_overflow
    assert scheduler.last_epoch == 0 and optimizer.param_groups[0]["lr"] == 0.1


@pytest.mark.fp16
def test_two_optimizers_share_one_scale_per_iteration() -> None:
    """An overflow in one optimizer's gradients skips that optimizer only; the other is
    unscaled with the scale its gradients were made with (not the lowered one)."""
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
    expected_b = {k: v.clone() for k, v in b.state_dict().items()}
    x = torch.randn(8, 4)
    with torch.autocast("cpu", dtype=torch.float16):
        reference_loss = b(x).float().mean() * 0.1  # * 0.1: 65536 x a mean over 8 rows would overflow
    grads = torch.autograd.grad(reference_loss, [b.weight, b.bias])
    expected_b["weight"] -= 0.1 * grads[0]
    expected_b["bias"] -= 0.1 * grads[1]
    accelerator = Accelerator(fp16=True, cpu=True)
    a, b, opt_a, opt_b = accelerator.prepare(
        a, b, torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    )
    a_before = [p.detach().clone() for p in a.parameters()]
    accelerator.backward(a(x).float().mean() * float("inf"))
    accelerator.backward(b(x).float().mean() * 0.1)
    opt_a.step()
    opt_b.step()
    assert opt_a.is_overflow and not opt_b.is_overflow
    assert all(torch.equal(p, q) for p, q in zip(a_before, a.parameters(), strict=True))
    for key, value in b.state_dict().items():
        torch.testing.assert_close(value, expected_b[key], rtol=1e-3, atol=1e-4)
    assert accelerator.precision.loss_scale == 32768.0  # lowered once, after both stepped
