"""The synchronised BatchNorm's pieces in one process (no launch): the autograd function against
torch's own batch_norm, the module against nn.BatchNorm, the conversion, and how the setting
flows (Accelerator argument, launcher variable, config key, launch flag, conflict messages).

With one process the all-reduce is the identity, so the function must BE batch_norm: that pins
its statistics, its backward and its running-statistics update; test_batchnorm_training.py checks
the reductions on 2 real ranks.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from accelerate_core import Accelerator
from accelerate_core.commands.launch import add_parser, plan
from accelerate_core.connector import resolve_sync_batchnorm
from accelerate_core.errors import ConfigFileError, ConflictingSettingsError, InvalidSettingError
from accelerate_core.launch.config import LaunchConfig, from_mapping
from accelerate_core.launch.settings import LaunchSettings, SettingSource
from accelerate_core.sync_batchnorm import (
    SyncBatchNorm,
    convert_sync_batchnorm,
    count_batchnorm_layers,
    sync_batch_norm,
)

FP32 = {"rtol": 1.3e-6, "atol": 1e-5}


def _one_process(tensor: torch.Tensor) -> None:
    """The all-reduce of a one-process group: nothing to add."""


@pytest.mark.parametrize("shape", [(8, 3), (6, 3, 5), (4, 3, 2, 2)])
def test_function_is_batch_norm_on_one_process(shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    x = (2.0 + 3.0 * torch.randn(*shape)).requires_grad_()
    weight = torch.randn(3, requires_grad=True)
    bias = torch.randn(3, requires_grad=True)
    y, mean, unbiased = sync_batch_norm(x, weight, bias, 1e-5, _one_process)
    running_mean, running_var = torch.zeros(3), torch.ones(3)
    expected = nn.functional.batch_norm(x, running_mean, running_var, weight, bias, True, 1.0, 1e-5)
    assert_close(y, expected, **FP32)
    # momentum 1.0: torch's running statistics are the batch mean and the UNBIASED variance.
    assert_close(mean, running_mean, **FP32)
    assert_close(unbiased, running_var, **FP32)
    grad = torch.randn_like(y)
    got = torch.autograd.grad(y, (x, weight, bias), grad)
    want = torch.autograd.grad(expected, (x, weight, bias), grad)
    for name, a, b in zip(("input", "weight", "bias"), got, want, strict=True):
        assert_close(a, b, **FP32, msg=lambda m, n=name: f"gradient of {n}: {m}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_input_is_computed_like_torch_autocast_does(dtype: torch.dtype) -> None:
    # Under torch.autocast, batch_norm gets the half input with fp32 weight and statistics, runs
    # in fp32 inside and returns the input's dtype. The synchronised function does the same, also
    # when the weight itself is half (a DeepSpeed engine's): its output is the fp32 result on the
    # same (half) values, rounded once to the input's dtype, as autocast's is.
    torch.manual_seed(0)
    x = (1.0 + torch.randn(16, 4)).to(dtype).requires_grad_()
    one_ulp = {"rtol": torch.finfo(dtype).eps, "atol": 1e-5}
    for w, b in ((torch.randn(4), torch.randn(4)), (torch.randn(4).to(dtype), torch.randn(4).to(dtype))):
        w, b = w.requires_grad_(), b.requires_grad_()
        exact = nn.functional.batch_norm(x.detach().float(), None, None, w.detach().float(),
                                         b.detach().float(), True, 0.1, 1e-5)
        y, _, _ = sync_batch_norm(x, w, b, 1e-5, _one_process)
        assert y.dtype == dtype
        assert_close(y.float(), exact, **one_ulp)
        if w.dtype == torch.float32:
            with torch.autocast("cpu", dtype=dtype):
                autocast = nn.functional.batch_norm(x, None, None, w, b, True, 0.1, 1e-5)
            assert autocast.dtype == dtype
            assert_close(autocast.float(), exact, **one_ulp)
        grad_x, grad_w, grad_b = torch.autograd.grad(y, (x, w, b), torch.ones_like(y))
        assert grad_x.dtype == dtype and grad_w.dtype == grad_b.dtype == w.dtype


def test_module_is_batch_norm_on_one_process_training_and_eval() -> None:
    torch.manual_seed(0)
    for momentum in (0.1, None):  # None: the cumulative average over num_batches_tracked
        plain = nn.BatchNorm2d(3, momentum=momentum)
        nn.init.normal_(plain.weight)
        synced = convert_sync_batchnorm(nn.Sequential(plain))[0]
        twin = nn.BatchNorm2d(3, momentum=momentum)
        twin.load_state_dict(synced.state_dict())
        for _ in range(3):
            x = 1.0 + 2.0 * torch.randn(4, 3, 2, 2)
            assert_close(synced(x), twin(x), **FP32)
        for name, value in twin.state_dict().items():
            assert_close(synced.state_dict()[name], value, **FP32, msg=lambda m, n=name: f"{n}: {m}")
        synced.eval()
        twin.eval()
        x = torch.randn(2, 3, 2, 2)
        assert_close(synced(x), twin(x), **FP32)


def test_conversion_keeps_parameter_objects_buffers_and_state_dict_keys() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6, momentum=0.3),
                          nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2).eval(), nn.InstanceNorm2d(2)))
    model[1].running_mean.fill_(0.5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = list(model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # built before the conversion
    converted = convert_sync_batchnorm(model)
    assert converted is model  # children replaced in place, as torch's converter does
    assert isinstance(model[1], SyncBatchNorm) and isinstance(model[2][1], SyncBatchNorm)
    assert isinstance(model[2][2], nn.InstanceNorm2d)  # not a BatchNorm: left alone
    assert model[1].momentum == 0.3 and not model[2][1].training
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    assert optimizer.param_groups[0]["params"][2] is model[1].weight
    assert list(model.state_dict()) == list(before)
    for key, value in before.items():
        assert torch.equal(model.state_dict()[key], value), key
    assert count_batchnorm_layers(model) == (0, 2)
    assert convert_sync_batchnorm(model) is model and count_batchnorm_layers(model) == (0, 2)
    lone = nn.BatchNorm1d(3)
    assert isinstance(convert_sync_batchnorm(lone), SyncBatchNorm)  # the root itself


def test_sync_batchnorm_on_one_process_changes_nothing() -> None:
    accelerator = Accelerator(cpu=True, sync_batchnorm=True)
    assert accelerator.settings.sync_batchnorm is True and accelerator.num_processes == 1
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    prepared = accelerator.prepare(model)
    assert count_batchnorm_layers(accelerator.unwrap_model(prepared)) == (1, 0)
    accelerator.free_memory()


# -- how the setting flows ---------------------------------------------------------------------

def test_the_launcher_variable_turns_it_on_and_an_argument_may_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_CORE_SYNC_BATCHNORM", "1")
    assert Accelerator(cpu=True).settings.sync_batchnorm is True
    assert Accelerator(cpu=True, sync_batchnorm=True).settings.sync_batchnorm is True
    monkeypatch.delenv("ACCELERATE_CORE_SYNC_BATCHNORM")
    assert Accelerator(cpu=True).settings.sync_batchnorm is False  # off by default


def test_a_contradicting_argument_names_the_flag_or_the_config_key() -> None:
    flag = LaunchSettings(sync_batchnorm=True, sources={
        "sync_batchnorm": SettingSource("flag", "--sync-batchnorm", "--sync-batchnorm")})
    with pytest.raises(ConflictingSettingsError) as info:
        resolve_sync_batchnorm(False, flag)
    message = str(info.value)
    assert message.startswith("Accelerator(sync_batchnorm=False): the launcher was told "
                              "sync_batchnorm=True by the launch flag `--sync-batchnorm`"), message
    assert "drop `--sync-batchnorm` from the `accelerate-core launch` command, or change it to " \
           "`--no-sync-batchnorm`" in message, message
    config = LaunchSettings(sync_batchnorm=False, sources={
        "sync_batchnorm": SettingSource("config file", "/cfg/launch.yaml")})
    with pytest.raises(ConflictingSettingsError) as info:
        resolve_sync_batchnorm(True, config)
    assert "in /cfg/launch.yaml, change `sync_batchnorm: false` to `sync_batchnorm: true` or to " \
           "`sync_batchnorm: null`" in str(info.value), str(info.value)
    with pytest.raises(InvalidSettingError, match="sync_batchnorm='yes'"):
        resolve_sync_batchnorm("yes", LaunchSettings())  # type: ignore[arg-type]


def test_config_key_and_launch_flag_reach_the_processes(tmp_path: Path) -> None:
    config = from_mapping({"version": 1, "num_processes": 2, "sync_batchnorm": True}, "test")
    assert config.sync_batchnorm is True
    assert config.to_launch_settings().to_environ()["ACCELERATE_CORE_SYNC_BATCHNORM"] == "1"
    assert LaunchConfig().to_launch_settings().to_environ().get("ACCELERATE_CORE_SYNC_BATCHNORM") is None
    with pytest.raises(ConfigFileError, match="sync_batchnorm"):
        from_mapping({"version": 1, "sync_batchnorm": "sometimes"}, "test")

    parser = argparse.ArgumentParser()
    launch = add_parser(parser.add_subparsers())
    script = tmp_path / "train.py"
    script.write_text("")
    missing = tmp_path / "none.yaml"
    missing.write_text("version: 1\n")
    for argv, expected in ((["--sync-batchnorm"], "1"), (["--no-sync-batchnorm"], "0"), ([], None)):
        args = launch.parse_args(["--config-file", str(missing), "--num-processes", "2", *argv, str(script)])
        env = plan(args).env_updates
        assert env.get("ACCELERATE_CORE_SYNC_BATCHNORM") == expected, argv
