"""deepspeed stays optional: never imported by `import accelerate_core`, only when a DeepSpeed
strategy is used, and a clear install hint when it is asked for but absent.

"Absent" is made real, not mocked: a child Python starts with `-S` (no site-packages) and a
PYTHONPATH holding the repo and a copy of this environment's site-packages made of symlinks to
every entry except deepspeed's. For that interpreter deepspeed is simply not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

from accelerate_core.imports import DEEPSPEED_INSTALL_HINT
from tests.run_if import run_if

# Its outcome depends on whether deepspeed is installed: tests(nodeepspeed) runs it too.
pytestmark = pytest.mark.nodeepspeed

REPO_ROOT = Path(__file__).resolve().parents[2]

# Runs in the child: every module of the package is imported, then the DeepSpeed path is asked for.
WALK_AND_ASK = r"""
import importlib, json, pkgutil, sys
import accelerate_core
from accelerate_core import Accelerator, DeepSpeedPlugin
from accelerate_core.imports import is_deepspeed_available

names = [m.name for m in pkgutil.walk_packages(accelerate_core.__path__, "accelerate_core.")]
for name in names:
    importlib.import_module(name)
loaded = lambda: sorted(m for m in sys.modules if m.split(".")[0] == "deepspeed")
result = {"modules": names, "after_imports": loaded(), "available": is_deepspeed_available()}
accelerator = Accelerator(cpu=True)          # a plain backend never needs deepspeed
result["plain_backend"] = accelerator.settings.strategy_name
result["after_plain"] = loaded()
try:
    Accelerator(cpu=True, deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    result["error"] = None
except ImportError as exc:
    result["error"] = [type(exc).__name__, str(exc)]
result["after_deepspeed"] = loaded()
print("RESULT " + json.dumps(result))
"""


def _site_packages_without_deepspeed(tmp_path: Path) -> Path:
    mirror = tmp_path / "site-packages"
    mirror.mkdir()
    # Where this interpreter really finds its packages (torch's folder covers a python run with -S,
    # for which sysconfig names the base installation's site-packages, not the venv's).
    # The first folder holding a name wins, as on sys.path.
    roots = [str(Path(torch.__file__).parents[1]), sysconfig.get_paths()["purelib"],
             sysconfig.get_paths()["platlib"]]
    for root in dict.fromkeys(roots):
        if not Path(root).is_dir():
            continue
        for entry in Path(root).iterdir():
            if entry.name.lower().startswith("deepspeed") or (mirror / entry.name).exists():
                continue
            (mirror / entry.name).symlink_to(entry)
    return mirror


def _run_child(code: str, pythonpath: list[Path], no_site: bool) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ACCELERATE_CORE_") and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    command = [sys.executable, *(["-S"] if no_site else []), "-c", code]
    proc = subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    result: dict[str, object] = json.loads(line[len("RESULT "):])
    return result


def test_without_deepspeed_the_core_works_and_asking_for_it_names_the_install(tmp_path: Path) -> None:
    mirror = _site_packages_without_deepspeed(tmp_path)
    result = _run_child(WALK_AND_ASK, [REPO_ROOT, mirror], no_site=True)
    assert result["available"] is False
    assert "accelerate_core.strategies.deepspeed.strategy" in str(result["modules"])  # imported, and harmless
    assert result["after_imports"] == [] and result["after_plain"] == []
    assert result["plain_backend"] == "single"
    error = result["error"]
    assert isinstance(error, list), "asking for DeepSpeed without deepspeed must raise ImportError"
    assert error[0] == "MissingDependencyError"  # a subclass of ImportError
    assert DEEPSPEED_INSTALL_HINT in error[1]


@pytest.mark.deepspeed
@run_if(deepspeed=True, why="nothing to keep unimported")
def test_with_deepspeed_it_is_imported_only_when_a_deepspeed_strategy_is_used() -> None:
    result = _run_child(WALK_AND_ASK, [REPO_ROOT], no_site=False)
    assert result["available"] is True
    # Importing every module of the package and running a plain backend load no deepspeed ...
    assert result["after_imports"] == [] and result["after_plain"] == []
    # ... the DeepSpeed strategy does.
    assert result["error"] is None
    assert "deepspeed" in str(result["after_deepspeed"]).split("'")
