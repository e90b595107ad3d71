"""The plain reference computed in a child process whose environment caps the CPU's kernels: the
calibration variant for the kernel level (AVX2 against AVX-512), which no setting can change
inside a process once torch has started (ATen, oneDNN and MKL read their caps at start-up).

The parent asks for every task x precision it needs at once (one child, one torch start-up); the
child writes each record beside a note of what its torch ran with, read back from torch itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.record.record_format import Record

# torch (ATen), oneDNN and MKL capped at AVX2: the kernels an AVX2-only CPU runs (the tests'
# older-CPU pass uses the same caps, noxfile.py).
AVX2_KERNELS: tuple[tuple[str, str], ...] = (("ATEN_CPU_CAPABILITY", "avx2"), ("DNNL_MAX_CPU_ISA", "AVX2"),
                                             ("MKL_ENABLE_INSTRUCTIONS", "AVX2"))
_RAN_WITH = "ran_with.json"


class ChildReferenceError(RuntimeError):
    pass


@dataclass(frozen=True)
class ChildRecords:
    records: dict[tuple[str, str], Record]  # (task, precision) -> the reference's record
    cpu_capability: str  # what the child's torch reported (torch.backends.cpu.get_cpu_capability())


def child_records(pairs: Iterable[tuple[str, str]], environment: Mapping[str, str],
                  timeout_s: float = 600.0) -> ChildRecords:
    """The golden's loop (no perturbation) for each (task, precision), run in a child process
    with `environment` added to this one's."""
    wanted = sorted(set(pairs))
    with tempfile.TemporaryDirectory(prefix="calibrate-child-") as tmp:
        out = Path(tmp)
        command = [sys.executable, "-m", "harness.calibrate.child_reference", str(out),
                   *(f"{task}:{precision}" for task, precision in wanted)]
        done = subprocess.run(command, env={**os.environ, **environment}, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        if done.returncode != 0:
            caps = " ".join(f"{k}={v}" for k, v in environment.items())
            raise ChildReferenceError(f"the reference under {caps} failed (exit {done.returncode}): "
                                      f"{done.stderr.strip()[-2000:]}")
        ran_with = json.loads((out / _RAN_WITH).read_text(encoding="utf-8"))
        records = {(task, precision): Record.load(out / f"{task}-{precision}") for task, precision in wanted}
    return ChildRecords(records, str(ran_with["cpu_capability"]))


def main(argv: list[str]) -> int:
    import torch

    from harness.golden.reference import ReferenceInputs, train_reference
    from harness.tasks import get_task

    out, requests = Path(argv[0]), argv[1:]
    for request in requests:
        task_name, precision = request.split(":")
        task = get_task(task_name)
        record = train_reference(task, precision, inputs=ReferenceInputs.of(task))
        record.save(out / f"{task_name}-{precision}")
    (out / _RAN_WITH).write_text(json.dumps({"cpu_capability": torch.backends.cpu.get_cpu_capability()}),
                                 encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
