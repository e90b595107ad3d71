"""The supported DeepSpeed range: releases the matrix showed broken are refused at use, with the
measured reason, before deepspeed is imported; the declared range is the one in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import tomllib

from accelerate_core.deepspeed_support import (
    FINDINGS,
    SUPPORTED_RANGE,
    UnsupportedDeepSpeedError,
    check_deepspeed_release,
    parse_release,
)
from accelerate_core.errors import MissingDependencyError
from tests.distributed_helpers import REPO_ROOT

# Its outcome depends on whether deepspeed is installed: tests(nodeepspeed) runs it too.
pytestmark = pytest.mark.nodeepspeed


@pytest.mark.parametrize(("version", "parsed"), [("0.19.8", (0, 19, 8)), ("0.18.9+cu121", (0, 18, 9)),
                                                  ("0.20.0rc1", (0, 20, 0)), ("1.0", (1, 0))])
def test_release_numbers_ignore_local_and_pre_release_tails(version: str, parsed: tuple[int, ...]) -> None:
    assert parse_release(version) == parsed


@pytest.mark.parametrize("finding", [f for f in FINDINGS if not f.supported], ids=lambda f: f.release)
def test_a_release_the_matrix_showed_broken_is_refused_with_what_was_measured(finding) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnsupportedDeepSpeedError) as raised:
        check_deepspeed_release(finding.release)
    message = str(raised.value)
    assert f"deepspeed {finding.release} is installed" in message
    assert finding.finding in message and SUPPORTED_RANGE in message and "Fix: pip install" in message
    assert isinstance(raised.value, MissingDependencyError)  # still an ImportError for callers


def test_an_untested_older_release_is_refused_too() -> None:
    with pytest.raises(UnsupportedDeepSpeedError, match=r"deepspeed 0\.14\.0 is installed.*before 0\.19\.4"):
        check_deepspeed_release("0.14.0")


def test_the_supported_release_passes_silently_and_a_newer_series_warns() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_deepspeed_release("0.19.8")
    with pytest.warns(UserWarning, match=r"deepspeed 0\.20\.1 is newer than any release.*run the matrix"):
        check_deepspeed_release("0.20.1")


def test_pyproject_declares_the_same_range() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["deepspeed"] == [f"deepspeed{SUPPORTED_RANGE}"]
    # the sweep's measurements (docs/versions.md): every patch of the range passes every CPU ZeRO cell
    assert {f.release for f in FINDINGS if f.supported} == {f"0.19.{patch}" for patch in range(4, 9)}


def test_the_core_refuses_an_installed_unsupported_release_before_importing_it(tmp_path: Path) -> None:
    # A deepspeed 0.18.9 distribution first on sys.path (metadata and a package that fails loudly
    # if imported): asking for DeepSpeed must stop at the version, with the fix.
    (tmp_path / "deepspeed-0.18.9.dist-info").mkdir()
    (tmp_path / "deepspeed-0.18.9.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: deepspeed\nVersion: 0.18.9\n")
    (tmp_path / "deepspeed").mkdir()
    (tmp_path / "deepspeed" / "__init__.py").write_text("raise SystemExit('deepspeed was imported')\n")
    code = (
        "import sys\n"
        "from accelerate_core import Accelerator, DeepSpeedPlugin\n"
        "from accelerate_core.deepspeed_support import UnsupportedDeepSpeedError\n"
        "try:\n"
        "    Accelerator(cpu=True, deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))\n"
        "except UnsupportedDeepSpeedError as exc:\n"
        "    print('REFUSED', exc)\n"
        "assert 'deepspeed' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": f"{tmp_path}:{REPO_ROOT}", "PATH": "/usr/bin:/bin",
                                            "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "REFUSED deepspeed 0.18.9 is installed" in done.stdout and "Output 0 of Split" in done.stdout


def test_the_override_runs_a_refused_release_with_a_warning_for_measuring_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ACCELERATE_CORE_ALLOW_UNSUPPORTED_DEEPSPEED=1 is how the version sweep measures a release
    outside the range: a warning with the same message instead of the refusal. Asking whether a
    release IS supported (allow_override=False) ignores it."""
    from accelerate_core.deepspeed_support import ALLOW_UNSUPPORTED_ENV

    monkeypatch.setenv(ALLOW_UNSUPPORTED_ENV, "1")
    with pytest.warns(UserWarning, match=r"results are not to be trusted.*deepspeed 0\.18\.9 is installed"):
        check_deepspeed_release("0.18.9")
    with pytest.raises(UnsupportedDeepSpeedError):
        check_deepspeed_release("0.18.9", allow_override=False)
    monkeypatch.setenv(ALLOW_UNSUPPORTED_ENV, "yes")  # only "1" switches it on
    with pytest.raises(UnsupportedDeepSpeedError):
        check_deepspeed_release("0.18.9")


def test_an_unmeasured_patch_of_the_supported_series_gets_no_other_release_finding() -> None:
    with pytest.raises(UnsupportedDeepSpeedError) as raised:
        check_deepspeed_release("0.19.2")
    assert "before 0.19.4, and this one was not measured" in str(raised.value)
    assert not any(f.finding in str(raised.value) for f in FINDINGS)
    older_series = r"deepspeed 0\.18\.3 is installed.*\(deepspeed 0\.18\.9\)"
    with pytest.raises(UnsupportedDeepSpeedError, match=older_series):
        check_deepspeed_release("0.18.3")  # an older series: its newest patch's finding stands for it
