"""Making goldens in the deterministic generation mode, in a child process.

fp32 results of the same code differ between x86 CPUs in the last bits: torch picks its vector
kernels by the CPU (AVX2, AVX-512), oneDNN and MKL pick theirs, and other widths sum in another
order. Measured on one machine, three settings together made the reference ISA-independent
(bit-identical goldens with the ISA capped at SSE4.1, AVX2 or not capped), while each alone did
not (docs/goldens.md has the figures):

- `ATEN_CPU_CAPABILITY=default`: torch's own kernels in their portable build;
- `MKL_CBWR=COMPATIBLE`: MKL's conditional numerical reproducibility, the same code path on
  every CPU;
- oneDNN off (`torch.backends.mkldnn.enabled = False`): its kernels are chosen by the CPU.

The first two are read when torch loads, so goldens are made in a child process started with
them, one intra-op thread, and oneDNN switched off before the first op. The child writes each
golden as a record into a scratch folder; the parent reads them back. Its JSON metadata names
the machine it was made on (`made_on`, from accelerate_core.machine, which describes and
computes nothing; the numbers come from harness.golden.reference alone).

The portable kernels also DRAW differently: float32 `randn` of 16+ elements, `uniform_` with
bounds (nn.Linear's init) and `linspace` give other last bits than the AVX2/AVX-512 kernels the
cells run with. So the parent, in the ordinary mode like the cells, makes each task's initial
weights and data (`ReferenceInputs`) and hands them to the child, and the golden's
`data_sha256` / `init_sha256` are the parent's: the golden starts exactly where the cells start.

    python -m harness.golden.golden_generation [--native-kernels] [--import PATH ...] \\
        OUT_DIR TASK:PRECISION [...]

`--import PATH` (a user's task module or `module:Task`, harness.tasks.import_tasks) comes first
for every task that is not built in, so the child has the same tasks as the parent.

`--native-kernels` (with `generate(..., deterministic=False)`) makes them the ordinary way, with
the kernels this CPU picks: only benchmarks/golden_portability.py uses it, to measure how far
that moves them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from harness.errors import GenerationError
from harness.golden.reference import ReferenceInputs, train_reference
from harness.paths import REPO_ROOT
from harness.record.record_format import Record
from harness.tasks import get_task, import_tasks
from harness.tasks.base import Task, describe
from harness.tasks.registry import import_paths_of

DETERMINISTIC_ENVIRONMENT = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
GENERATION_MODE = {
    **DETERMINISTIC_ENVIRONMENT,
    "onednn": "off",
    "intra_op_threads": "1",
}




def generate(pairs: Sequence[tuple[str, str]], *, deterministic: bool = True,
             extra_environment: dict[str, str] | None = None,
             timeout_s: float = 600.0) -> dict[tuple[str, str], Record]:
    """Goldens for (task, precision) pairs, made in one child process (deterministic mode unless
    told otherwise; `extra_environment` e.g. caps the ISA, for measurements)."""
    if not pairs:
        return {}
    with tempfile.TemporaryDirectory(prefix="golden-generation-") as scratch:
        for name in sorted({task for task, _ in pairs}):
            torch.save(asdict(ReferenceInputs.of(get_task(name))), Path(scratch) / f"{name}.inputs.pt")
        flags = [] if deterministic else ["--native-kernels"]
        for path in import_paths_of(sorted({task for task, _ in pairs})):
            flags += ["--import", path]
        command = [sys.executable, "-m", "harness.golden.golden_generation", *flags, scratch,
                   *(f"{task}:{precision}" for task, precision in pairs)]
        environment = {**os.environ, **(DETERMINISTIC_ENVIRONMENT if deterministic else {}),
                       **(extra_environment or {})}
        environment["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        done = subprocess.run(command, env=environment, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        if done.returncode != 0:
            raise GenerationError(f"making goldens failed (exit {done.returncode}):\n"
                                  f"{done.stdout[-2000:]}{done.stderr[-4000:]}")
        made = {}
        for task_name, precision in pairs:
            record = Record.load(Path(scratch) / f"{task_name}-{precision}")
            task = get_task(task_name)
            record.meta["golden"].update(data_sha256=task.data_sha256(), init_sha256=task.init_sha256())
            made[(task_name, precision)] = record
        return made

# A golden's own words for what made it, part of what it is (golden_check compares it): kept as the
# checked-in goldens say it, with the module path they were made under, so moving a module
# changes no golden.
MADE_BY = "harness.truth.reference.train_reference (plain PyTorch, one process, one thread)"


def make_golden(task: Task, precision: str, inputs: ReferenceInputs | None = None) -> Record:
    """The golden for `task` at `precision`, in memory, made in THIS process as it is: call it
    through `generate` (or run this module) for the deterministic mode."""
    record = train_reference(task, precision, inputs=inputs)
    record.meta = {"golden": {
        "task_definition_hash": task.definition_hash(),
        "data_sha256": task.data_sha256(),
        "seed": task.seed,
        "task": describe(task),
        "made_by": MADE_BY,
    }}
    return record


def _child(out_dir: Path, specs: Sequence[str], deterministic: bool) -> None:
    if deterministic:
        torch.backends.mkldnn.enabled = False  # type: ignore[assignment]  # before the first op
    # Descriptive only (no numerics); imported here so that importing this module, like
    # harness.golden.reference and harness.golden.golden_store, loads nothing from accelerate_core.
    from accelerate_core.machine import describe_machine

    machine = describe_machine()
    for spec in specs:
        task_name, _, precision = spec.partition(":")
        inputs = ReferenceInputs(**torch.load(out_dir / f"{task_name}.inputs.pt", weights_only=True))
        record = make_golden(get_task(task_name), precision, inputs)
        record.meta["golden"]["made_on"] = machine
        record.meta["golden"]["generation_mode"] = GENERATION_MODE if deterministic else "native kernels"
        record.save(out_dir / f"{task_name}-{precision}")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    native = "--native-kernels" in arguments
    arguments = [a for a in arguments if a != "--native-kernels"]
    while arguments[:1] == ["--import"]:
        import_tasks([arguments[1]])
        arguments = arguments[2:]
    _child(Path(arguments[0]), arguments[1:], deterministic=not native)
