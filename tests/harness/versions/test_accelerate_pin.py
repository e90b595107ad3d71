"""`accelerate_version` on [[environments.*]]: one exact release, only in an environment of the
accelerate implementation; `harness run --env-name NAME` refuses a venv whose accelerate is not
the pin (as it refuses another torch or deepspeed); report.json's environment names the release."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from harness.cli.run import check_env_pins
from harness.errors import MatrixError, UsageError
from harness.plan.matrix import load_matrix
from tests.distributed_helpers import REPO_ROOT
from tests.harness.runner_helpers import write_matrix_file

ENV = '''
[environments.acc_x]
description = "CPU, accelerate pinned"
deepspeed = true
device = "cpu"
extras = ["test"]
torch_version = "2.13.0"
deepspeed_version = "0.19.8"
sweep = true
'''


def _matrix(tmp_path: Path, body: str) -> Path:
    text = (REPO_ROOT / "matrix" / "matrix.toml").read_text(encoding="utf-8")
    path = tmp_path / "matrix.toml"
    write_matrix_file(path, text + ENV + body)
    return path


def test_the_sweep_has_accelerate_releases_each_with_its_pin_and_the_implementation() -> None:
    envs = {n: e for n, e in load_matrix().environments.items() if e.accelerate_version}
    assert len({e.accelerate_version.rsplit(".", 1)[0] for e in envs.values()}) >= 3  # minor releases
    for name, env in envs.items():
        assert env.sweep and env.implementation == "accelerate", name
        assert (env.torch_version, env.deepspeed_version) == ("2.13.0", "0.19.8"), name
        assert env.markexpr == "not gpu and not multi_gpu", name
        assert "accelerate" not in env.extras, f"{name}: the pin replaces the declared range"
    newest = max(envs.values(), key=lambda e: tuple(int(p) for p in e.accelerate_version.split(".")))
    assert all(e.compare_with == newest.name for e in envs.values() if e is not newest)


def test_a_pin_parses_into_the_environment(tmp_path: Path) -> None:
    matrix = load_matrix(_matrix(tmp_path, 'implementation = "accelerate"\naccelerate_version = "1.14.0"\n'))
    assert matrix.environments["acc_x"].accelerate_version == "1.14.0"
    assert matrix.environments["deepspeed"].accelerate_version == ""


@pytest.mark.parametrize("pin", ['">=1.15"', '"1.15"', "1.15"])
def test_a_pin_that_is_not_one_release_is_refused_with_the_fix(tmp_path: Path, pin: str) -> None:
    path = _matrix(tmp_path, f'implementation = "accelerate"\naccelerate_version = {pin}\n')
    with pytest.raises(MatrixError) as caught:
        load_matrix(path)
    message = str(caught.value)
    assert "[environments.acc_x].accelerate_version" in message
    assert "it must be one exact release to pin" in message
    assert "Valid: a release number such as '2.13.0'" in message
    assert 'Fix: write accelerate_version = "X.Y.Z"' in message


def test_a_pin_outside_the_accelerate_implementation_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(MatrixError) as caught:
        load_matrix(_matrix(tmp_path, 'accelerate_version = "1.16.0"\n'))
    message = str(caught.value)
    assert "[environments.acc_x].accelerate_version = '1.16.0'" in message
    assert "whose implementation is 'core'" in message
    assert "Valid: implementation = 'accelerate' with a pin, or no pin" in message
    assert 'Fix: write implementation = "accelerate", or drop the pin' in message


def _installed(versions: dict[str, str]):  # type: ignore[no-untyped-def]
    def version(package: str) -> str:
        if package not in versions:
            raise metadata.PackageNotFoundError(package)
        return versions[package]
    return version


def test_run_refuses_an_environment_whose_accelerate_is_not_its_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = load_matrix()
    name = next(n for n, e in matrix.environments.items() if e.accelerate_version == "1.14.0")
    monkeypatch.setattr(metadata, "version",
                        _installed({"torch": "2.13.0+cpu", "deepspeed": "0.19.8", "accelerate": "1.16.0"}))
    with pytest.raises(UsageError) as caught:
        check_env_pins(matrix, name)
    message = str(caught.value)
    assert f"--env-name {name!r}" in message
    assert "pins accelerate==1.14.0, but accelerate 1.16.0 is installed here" in message
    assert "pip install accelerate==1.14.0" in message


def test_run_refuses_an_accelerate_environment_without_accelerate(monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = load_matrix()
    name = next(n for n, e in matrix.environments.items() if e.accelerate_version)
    monkeypatch.setattr(metadata, "version", _installed({"torch": "2.13.0", "deepspeed": "0.19.8"}))
    with pytest.raises(UsageError, match=r"accelerate \(not installed\) is installed here"):
        check_env_pins(matrix, name)


def test_run_accepts_the_pinned_releases(monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = load_matrix()
    name, env = next((n, e) for n, e in matrix.environments.items() if e.accelerate_version)
    monkeypatch.setattr(metadata, "version", _installed(
        {"torch": env.torch_version + "+cpu", "deepspeed": env.deepspeed_version,
         "accelerate": env.accelerate_version}))
    check_env_pins(matrix, name)  # no error
    check_env_pins(matrix, "deepspeed")  # an environment without pins: nothing to check


def test_report_json_environment_names_the_installed_accelerate(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.report import environment_info

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda p: "1.14.0" if p == "accelerate" else real(p))
    assert environment_info("x").to_json()["accelerate"] == "1.14.0"
    monkeypatch.setattr(metadata, "version", _installed({}))
    assert environment_info("x").to_json()["accelerate"] == "not installed"
