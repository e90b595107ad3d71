"""tests/run_if.py: each condition skips exactly where it does not hold, and the reason names what
is missing and how to get it. Asked of this machine as it is (and, for deepspeed, of a process
that cannot find it), never of a patched one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accelerate_core.imports import DEEPSPEED_INSTALL_HINT, is_deepspeed_available
from tests.accelerate_core.shared_launch import will_run
from tests.cpu_paths import NATIVE_FP16_HERE
from tests.deepspeed_absent import environ_without_deepspeed
from tests.distributed_helpers import REPO_ROOT
from tests.run_if import run_if, screenshot_script


def _skips(mark: pytest.MarkDecorator) -> tuple[bool, str]:
    assert mark.name == "skipif"
    condition = mark.args[0]
    assert isinstance(condition, bool)  # evaluated now: shared_launch.will_run reads it
    return condition, mark.kwargs["reason"]


def test_nothing_asked_never_skips() -> None:
    assert _skips(run_if())[0] is False


def test_deepspeed_skips_exactly_where_it_is_not_installed() -> None:
    needs, needs_reason = _skips(run_if(deepspeed=True))
    without, without_reason = _skips(run_if(deepspeed=False))
    assert needs is not is_deepspeed_available()
    assert without is is_deepspeed_available()
    if is_deepspeed_available():
        assert "deepspeed is installed" in without_reason and "nodeepspeed" in without_reason
    else:
        assert needs_reason.startswith("deepspeed is not installed")
        assert DEEPSPEED_INSTALL_HINT in needs_reason


def test_without_deepspeed_the_reason_names_it_and_how_to_install_it(tmp_path: Path) -> None:
    """The same factory in a process that cannot find deepspeed (tests/deepspeed_absent.py)."""
    code = ("import json; from tests.run_if import run_if; "
            "m = run_if(deepspeed=True, why='DeepSpeed tests skipped'); "
            "print(json.dumps([m.args[0], m.kwargs['reason']]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=environ_without_deepspeed(tmp_path / "site"), timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    skipped, reason = json.loads(done.stdout.strip().splitlines()[-1])
    assert skipped is True
    hint = f"(install it: {DEEPSPEED_INSTALL_HINT})"
    assert reason == f"deepspeed is not installed {hint} - DeepSpeed tests skipped"


def test_native_fp16_follows_onednn() -> None:
    skipped, reason = _skips(run_if(native_fp16=True))
    assert skipped is not NATIVE_FP16_HERE
    if skipped:
        assert "no native fp16" in reason


def test_too_few_cuda_devices_names_how_many_were_asked_and_found() -> None:
    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    skipped, reason = _skips(run_if(min_cuda_gpus=found + 2))
    assert skipped is True
    assert reason.startswith(f"needs {found + 2} CUDA devices, found {found} ")
    assert _skips(run_if(min_cuda_gpus=found))[0] is False  # as many as there are: it runs


def test_cuda_is_asked_of_torch() -> None:
    skipped, reason = _skips(run_if(cuda=True))
    assert skipped is not torch.cuda.is_available()
    if skipped:
        assert reason.startswith("no CUDA device")


def test_chromium_is_the_screenshot_scripts_search() -> None:
    script = screenshot_script()
    skipped, reason = _skips(run_if(chromium=True))
    assert skipped is (script.find_browser(None) is None)
    if skipped:
        assert "no headless Chromium on PATH" in reason and "apt-get install -y chromium" in reason


def test_every_unmet_condition_is_named_and_the_mark_is_read_as_skipping() -> None:
    """Asking for the absence of what is here, twice: both named, in the order asked."""
    on_linux = sys.platform.startswith("linux")
    mark = run_if(deepspeed=not is_deepspeed_available(), linux=not on_linux, why="what it covers")
    skipped, reason = _skips(mark)
    assert skipped is True
    first, second = reason.removesuffix(" - what it covers").split("; ")
    assert "deepspeed is" in first
    assert ("not on Linux" if on_linux else "Linux only") in second
    assert reason.endswith(" - what it covers")

    class Item:  # what shared_launch.will_run reads of a pytest item
        def get_closest_marker(self, name: str) -> None:
            return None

        def iter_markers(self, name: str) -> list[pytest.Mark]:
            return [mark.mark] if name == "skipif" else []

    assert will_run(Item()) is False
