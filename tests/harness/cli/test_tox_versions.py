"""tox's version-sweep environments are matrix.toml's (sweep = true), with the same pins; the
releases the core refuses are exactly those run with the override and measured, not gating."""

from __future__ import annotations

import configparser
import re

import pytest

from accelerate_core.deepspeed_support import UnsupportedDeepSpeedError, check_deepspeed_release
from harness.plan.matrix import load_matrix
from tests.distributed_helpers import REPO_ROOT

SWEEP = {name: env for name, env in load_matrix().environments.items() if env.sweep}


def _section() -> tuple[str, dict[str, list[str]]]:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO_ROOT / "tox.ini")
    name = next(s for s in tox.sections() if s.startswith("testenv:versions-"))
    keys = {key: [line.strip() for line in tox[name][key].splitlines() if line.strip()]
            for key in ("deps", "setenv", "ignore_outcome")}
    return name, keys


def _refused(version: str) -> bool:
    try:
        check_deepspeed_release(version, allow_override=False)
    except UnsupportedDeepSpeedError:
        return True
    return False


def test_tox_factors_are_the_sweep_environments_with_their_pins() -> None:
    name, keys = _section()
    factors = re.fullmatch(r"testenv:versions-\{(.*)\}", name)
    assert factors is not None and factors.group(1).split(",") == list(SWEEP)
    for env_name, env in SWEEP.items():
        assert f"{env_name}: torch=={env.torch_version}" in keys["deps"]
        assert f"{env_name}: deepspeed=={env.deepspeed_version}" in keys["deps"]
        assert f"{env_name}: SWEEP_MARKS = {env.markexpr}" in keys["setenv"]
        accelerate_pins = [line for line in keys["deps"] if line.startswith(f"{env_name}: accelerate")]
        assert accelerate_pins == ([f"{env_name}: accelerate=={env.accelerate_version}"]
                                   if env.accelerate_version else []), env_name
        implementation = f"{env_name}: SWEEP_IMPLEMENTATION = {env.implementation}"
        assert (implementation in keys["setenv"]) == (env.implementation != "core"), env_name


def test_tox_runs_each_environment_s_implementation_after_its_pins() -> None:
    """The accelerate pin comes after torch and deepspeed in deps, and the run names the
    implementation (core unless the factor sets another), as the noxfile's versions session does."""
    _, keys = _section()
    for env_name, env in SWEEP.items():
        if not env.accelerate_version:
            continue
        mine = [line for line in keys["deps"] if line.startswith(f"{env_name}:")]
        assert [line.split(": ")[1].split("==")[0] for line in mine] == ["torch", "deepspeed", "accelerate"]
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO_ROOT / "tox.ini")
    name = next(s for s in tox.sections() if s.startswith("testenv:versions-"))
    assert "--implementation {env:SWEEP_IMPLEMENTATION:core}" in tox[name]["commands"]
    assert any(env.accelerate_version for env in SWEEP.values())


@pytest.mark.parametrize("env_name", list(SWEEP))
def test_only_releases_the_core_refuses_run_with_the_override(env_name: str) -> None:
    _, keys = _section()
    refused = _refused(SWEEP[env_name].deepspeed_version)
    assert (f"{env_name}: ACCELERATE_CORE_ALLOW_UNSUPPORTED_DEEPSPEED = 1" in keys["setenv"]) == refused
    assert (f"{env_name}: true" in keys["ignore_outcome"]) == refused
