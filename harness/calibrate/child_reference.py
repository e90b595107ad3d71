"""The plain reference computed in a child process whose environment caps the CPU's kernels: the
calibration variant for the kernel level (AVX2 against AVX-512), which no setting can change
inside a process once torch has started (ATen, oneDNN and MKL read their caps at start-up).

The parent asks for every task x precision (x perturbation: a backend's own semantics, say) it
needs at once (one child, one torch start-up); the child writes each record beside a note of what
its torch ran with, read back from torch itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.golden.reference import Perturbation
from harness.record.record_format import Record
from harness.tasks.registry import import_paths_of

# torch (ATen), oneDNN and MKL capped at AVX2: the kernels an AVX2-only CPU runs (the tests'
# older-CPU pass uses the same caps, noxfile.py).
AVX2_KERNELS: tuple[tuple[str, str], ...] = (("ATEN_CPU_CAPABILITY", "avx2"), ("DNNL_MAX_CPU_ISA", "AVX2"),
                                             ("MKL_ENABLE_INSTRUCTIONS", "AVX2"))
_RAN_WITH = "ran_with.json"
_REQUESTS = "requests.json"
# (task, precision), the golden's loop; or (task, precision, perturbation)
Request = tuple[str, str] | tuple[str, str, Perturbation]


class ChildReferenceError(RuntimeError):
    pass


@dataclass(frozen=True)
class ChildRecords:
    records: dict[Request, Record]  # each request, as asked -> the reference's record
    cpu_capability: str  # what the child's torch reported (torch.backends.cpu.get_cpu_capability())


def child_records(requests: Iterable[Request], environment: Mapping[str, str],
                  timeout_s: float = 600.0) -> ChildRecords:
    """The reference for each request (the golden's loop, or the perturbation given), run in a
    child process with `environment` added to this one's."""
    wanted = list(dict.fromkeys(requests))
    with tempfile.TemporaryDirectory(prefix="calibrate-child-") as tmp:
        out = Path(tmp)
        # The user's tasks (a matrix's `tasks = [...]`) are registered by importing their modules:
        # the child imports what this process imported for them, or it would not know their names.
        imports = import_paths_of([request[0] for request in wanted])
        (out / _REQUESTS).write_text(json.dumps({"task_imports": imports,
                                                 "requests": [_request_json(r) for r in wanted]}),
                                     encoding="utf-8")
        command = [sys.executable, "-m", "harness.calibrate.child_reference", str(out)]
        done = subprocess.run(command, env={**os.environ, **environment}, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        if done.returncode != 0:
            caps = " ".join(f"{k}={v}" for k, v in environment.items())
            raise ChildReferenceError(f"the reference under {caps} failed (exit {done.returncode}): "
                                      f"{done.stderr.strip()[-2000:]}")
        ran_with = json.loads((out / _RAN_WITH).read_text(encoding="utf-8"))
        records = {request: Record.load(out / str(index)) for index, request in enumerate(wanted)}
    return ChildRecords(records, str(ran_with["cpu_capability"]))


def _request_json(request: Request) -> dict[str, object]:
    task, precision, *rest = request
    perturbation = rest[0] if rest else Perturbation()
    return {"task": task, "precision": precision, "perturbation": asdict(perturbation)}


def main(argv: list[str]) -> int:
    import torch

    from harness.golden.reference import ReferenceInputs, train_reference
    from harness.tasks import get_task, import_tasks

    out = Path(argv[0])
    asked = json.loads((out / _REQUESTS).read_text(encoding="utf-8"))
    import_tasks(asked["task_imports"])
    for index, request in enumerate(asked["requests"]):
        task = get_task(request["task"])
        record = train_reference(task, request["precision"], inputs=ReferenceInputs.of(task),
                                 perturbation=Perturbation(**request["perturbation"]))
        record.save(out / str(index))
    (out / _RAN_WITH).write_text(json.dumps({"cpu_capability": torch.backends.cpu.get_cpu_capability()}),
                                 encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
