"""`python -m harness script --implementation accelerate`: a user's Hugging Face Accelerate script
(examples/accelerate_train.py, unchanged) run through `accelerate launch` on one process, under
DDP and as a ZeRO-3 cell, recorded by the shim the harness installs in the launched processes
(harness/script/accelerate_site.py), and judged as script mode judges any script:

- the DDP cell matches its one-process reference on every quantity the script computed;
- the ZeRO-3 cell fails on evidence: on CPU Accelerate runs DDP (MULTI_CPU) and never starts
  DeepSpeed, and the record read from the prepared model says so;
- the shim leaves nothing behind: its temporary directory is gone after each launch, and the
  script's own folder holds exactly the bytes it held before.

Three launches, one `python -m harness script` run (module-scoped), read by the tests below.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.plan.cell import Cell
from harness.plan.matrix import load_matrix
from harness.script.cells import reference_of, script_cells
from harness.script.script_launch import accelerate_launch_flags, accelerate_shim
from tests.harness.runner_helpers import REPO_ROOT, run_harness_in_process

EXAMPLE = REPO_ROOT / "examples" / "accelerate_train.py"
SELECTION = "fp32 and (cpu1 or ddp or zero3) and not cuda"
TASK = "accelerate_train"

NOT_INSTALLED = 'Hugging Face Accelerate is not installed (pip install -e ".[accelerate]")'


@dataclass
class Run:
    done: subprocess.CompletedProcess[str]
    cells: dict[str, dict[str, Any]]
    report: Path
    script_dir: Path
    before: dict[str, str]  # the script folder's files and their hashes before the run

    def out(self) -> str:
        return f"exit {self.done.returncode}\n{self.done.stdout[-4000:]}\n{self.done.stderr[-4000:]}"


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    if importlib.util.find_spec("accelerate") is None:
        pytest.skip(NOT_INSTALLED)
    root = tmp_path_factory.mktemp("accelerate-script")
    script_dir = root / "user"
    script_dir.mkdir()
    script = script_dir / EXAMPLE.name
    shutil.copyfile(EXAMPLE, script)  # the user's folder: nothing may appear in it, nothing change
    before = _tree(script_dir)
    report = root / "report"
    done = run_harness_in_process(
        "script", "--implementation", "accelerate", "-k", SELECTION, "--report-dir", str(report),
        str(script), "--out", "{cell_dir}/model.pt", "--batch-size", "{8/processes}", timeout=900)
    cells = {}
    if (report / "report.json").exists():
        cells = {c["id"]: c for c in json.loads((report / "report.json").read_text())["cells"]}
    return Run(done, cells, report, script_dir, before)


@pytest.mark.slow
@pytest.mark.ddp
def test_the_accelerate_example_matches_its_reference_under_ddp(run: Run) -> None:
    assert run.done.returncode == 1, run.out()  # the zero3 cell fails (below); nothing else does
    assert run.cells[f"{TASK}-cpu1-single-fp32-accelerate"]["status"] == "passed", run.out()
    ddp = run.cells[f"{TASK}-cpu2-ddp-fp32-accelerate"]
    assert ddp["status"] == "passed", ddp["reason"]
    assert f"matches {TASK}-cpu1-single-fp32-accelerate" in ddp["reason"], ddp["reason"]
    compared = {c["quantity"] for c in ddp["comparisons"] if c["ok"]}
    # Everything the script computed: 2 epochs x 4 steps of losses and lrs, the gathered eval
    # outputs by the line that gathered them (a tuple: one entry per tensor), the final weights.
    assert {"losses", "lrs", "eval/accelerate_train.py:69/0", "eval/accelerate_train.py:69/1",
            "eval/accelerate_train.py:71", "state_dict/0.weight", "state_dict/2.bias"} <= compared
    evidence = ddp["extra"]["evidence"]
    assert len(ddp["extra"]["losses"]) == 16
    assert (evidence["strategy"], evidence["world_size"], evidence["device"]) == ("ddp", 2, "cpu")
    assert evidence["accelerate"] == "accelerate MULTI_CPU"
    assert (run.report / "cells" / f"{TASK}-cpu2-ddp-fp32-accelerate" / "model.pt").is_file()


@pytest.mark.slow
@pytest.mark.ddp
def test_a_zero3_cell_on_cpu_is_reported_as_the_ddp_it_ran(run: Run) -> None:
    zero3 = run.cells[f"{TASK}-cpu2-zero3-fp32-accelerate"]
    assert zero3["status"] == "failed", zero3["reason"]
    assert zero3["reason"] == ("evidence: asked for zero3 fp32 on cpu2, the script ran ddp no on cpu2 "
                               "(accelerate MULTI_CPU)"), zero3["reason"]
    assert zero3["extra"]["evidence"]["zero_stage"] is None  # no DeepSpeed engine was made


@pytest.mark.slow
@pytest.mark.ddp
def test_the_shim_leaves_nothing_behind(run: Run) -> None:
    assert _tree(run.script_dir) == run.before  # the script's folder: the same files, the same bytes
    shims = []
    for cell in run.cells:
        log = (run.report / "cells" / cell / "output.log").read_text(encoding="utf-8")
        found = re.match(r"\$ PYTHONPATH=([^ :]+)", log)
        assert found, log[:400]
        shims.append(Path(found[1]))
    assert len(shims) == 3 and all(s.name.startswith("harness-accelerate-shim-") for s in shims)
    assert not [s for s in shims if s.exists()]  # each launch's shim directory deleted when it ended


def test_the_shim_directory_goes_also_when_the_launch_fails() -> None:
    with pytest.raises(RuntimeError), accelerate_shim("ACCELERATE_CORE_RECORD_DIR") as shim:
        assert (shim / "sitecustomize.py").is_file()
        raise RuntimeError("the launch failed")
    assert not shim.exists()


def test_the_shim_watches_only_when_recording_and_runs_the_environments_own_sitecustomize(
        tmp_path: Path) -> None:
    own = tmp_path / "environment"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nopen(os.environ['MARK'], 'w').write('ran')\n")
    probe = "import sys; print(any(type(f).__name__ == '_WhenImported' for f in sys.meta_path))"
    with accelerate_shim("HARNESS_TEST_RECORD_DIR") as shim:
        for recording in ("", "1"):
            mark = tmp_path / f"mark{recording}"
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(own)]), "MARK": str(mark),
                   "HARNESS_TEST_RECORD_DIR": recording}
            done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == ("True" if recording else "False")  # the import hook
            assert mark.read_text() == "ran"  # the environment's sitecustomize, shadowed, still ran


def test_accelerate_script_cells_end_in_its_name_and_keep_it_in_their_reference() -> None:
    cells = {c.id: c for c in script_cells(load_matrix(), "train", {"accelerate"})}
    zero3 = cells["train-cpu2-zero3-bf16-accelerate"]
    assert all(cell_id.endswith("-accelerate") for cell_id in cells)
    assert reference_of(zero3, "cpu1-single").id == "train-cpu1-single-bf16-accelerate"
    # Accelerate's launcher: one of --cpu / --multi_gpu / --use_deepspeed / --use_fsdp; a CPU
    # cell of N processes gets ACCELERATE_USE_CPU, what --cpu sets for one.
    flags, env = accelerate_launch_flags(zero3, 29999)
    assert flags[flags.index("--zero_stage") + 1] == "3" and "--use_deepspeed" in flags
    assert "--cpu" not in flags and env == {"ACCELERATE_USE_CPU": "true"}
    assert "--cpu" in accelerate_launch_flags(Cell.from_id("t-cpu1-single-fp32-accelerate"), 1)[0]
    fsdp_flags = accelerate_launch_flags(Cell.from_id("t-cpu2-fsdp-fp16-accelerate"), 1)[0]
    assert fsdp_flags[fsdp_flags.index("--fsdp_version") + 1] == "2"
    assert fsdp_flags[fsdp_flags.index("--mixed_precision") + 1] == "fp16"
