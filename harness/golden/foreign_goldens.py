"""Goldens that look made on another machine: a way to see a foreign CPU without one.

Goldens are made in the deterministic generation mode, which reproduces them bit for bit on most
x86 CPUs but not all (docs/goldens.md: on an AMD EPYC, MKL's vendor dispatch moves the
`classifier` goldens by a few ulps). A test that assumes the checked-in goldens were made on the
machine running it (it compares their bytes with a regeneration, or counts the tensors that
moved) passes wherever they were made and fails everywhere else. Capping this CPU's ISA does not
show that: one vendor's CPU capped is not another vendor's.

`make_foreign_goldens` copies a golden folder and moves every golden the way a regeneration on
another CPU moves it: a share of the elements of each computed tensor (losses, eval outputs,
weights) by one or two units in the last place of the precision the value was computed in,
always inside the precision's regeneration tolerance (matrix/golden/regeneration.toml), then
re-hashes it and names another machine in `made_on`, as `golden --update` there would. The
learning rates (Python arithmetic on the schedule, the same bits on any CPU), loss scales (powers
of two) and integer tensors stay. Every golden of the copy is then "reproduced within" on this
machine, never "bit-identical" and never "changed".

    python -m harness.golden.foreign_goldens OUT_DIR [--source DIR] [--seed N]

then run with `HARNESS_GOLDEN_DIR=OUT_DIR` (harness.paths); `nox -s foreign_goldens` does both.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

import torch

from harness.golden.global_rng import GLOBAL_RNG_LOCK
from harness.golden.regeneration import REGENERATION_TABLE, RegenerationTolerance, regeneration_tolerance
from harness.paths import REPOSITORY_GOLDEN_DIR
from harness.record.record_format import Record
from harness.tasks import get_task

# The machine a foreign golden names: the fields golden_check.machine_line reads, and nothing
# that could be mistaken for a real CPU.
FOREIGN_MACHINE: dict[str, Any] = {
    "cpu": {
        "architecture": "x86_64",
        "model": "Foreign CPU (simulated by harness.golden.foreign_goldens)",
        "flags": {"avx2": True, "avx512f": False, "avx512_fp16": False, "avx512_bf16": False,
                  "amx_bf16": False},
        "native_fp16": False,
        "native_bf16": False,
        "torch_cpu_capability": "DEFAULT",
    },
    "cuda": {"available": False, "devices": [], "torch_cuda": "none (CPU build)"},
    "environment": {},
}
# Share of a tensor's elements that move: close to what a real regeneration on another vendor's
# CPU moved (20% of `classifier`'s fp32 weights, AMD EPYC against the Intel-made goldens).
MOVED_SHARE = 0.25


def make_foreign_goldens(out_dir: Path, source: Path | None = None, seed: int = 0) -> list[str]:
    """Copy the golden folder `source` (default: the checked-in one, never goldens already moved:
    HARNESS_GOLDEN_DIR may point at such a copy) into `out_dir`, every golden moved as a
    regeneration on another CPU would move it. Returns the goldens' labels."""
    source = source or REPOSITORY_GOLDEN_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():  # the regeneration table and anything else the folder holds
        if path.is_file() and not path.name.endswith((".json", ".safetensors")):
            shutil.copy(path, out_dir / path.name)
    generator = torch.Generator().manual_seed(seed)
    labels = []
    for json_path in sorted(source.glob("*.json")):
        stem = json_path.with_suffix("")
        record = Record.load(stem, fix="restore the golden folder from the repository")
        tolerance = regeneration_tolerance(record.precision, out_dir / REGENERATION_TABLE.name)
        move_like_another_cpu(record, tolerance, generator)
        record.meta.setdefault("golden", {})["made_on"] = FOREIGN_MACHINE
        record.save(out_dir / stem.name)
        labels.append(stem.name)
    return labels


def move_like_another_cpu(record: Record, tolerance: RegenerationTolerance,
                          generator: torch.Generator) -> None:
    """Move `record`'s computed values in place by one or two ulps, inside `tolerance`.

    Only what a CPU computes moves: the losses, the eval outputs but the labels (the data itself,
    gathered back), the weights that training changed. A frozen weight or a buffer the run never
    touched equals the task's initial value, which every machine starts from (a golden's
    init_sha256 says so), and stays."""
    untouched = _initial_values(record.task)
    record.losses = _moved(torch.tensor(record.losses, dtype=torch.float64), torch.float32, tolerance,
                           generator).tolist()
    computed = {**{("eval", k): v for k, v in record.eval_outputs.items() if k != "labels"},
                **{("state", k): v for k, v in record.state_dict.items()
                   if not (k in untouched and torch.equal(untouched[k], v))}}
    for (part, key), value in computed.items():
        if value.is_floating_point():
            computed_in = torch.float32 if value.dtype == torch.float64 else value.dtype
            target = record.eval_outputs if part == "eval" else record.state_dict
            target[key] = _moved(value, computed_in, tolerance, generator)


def _initial_values(task_name: str) -> dict[str, torch.Tensor]:
    """The task's initial state dict, as every machine builds it; empty for a task this process
    does not know (a user's task not imported): then every weight is treated as trained."""
    try:
        task = get_task(task_name)
    except KeyError:
        return {}
    with GLOBAL_RNG_LOCK:
        return task.build_model().state_dict()


def _moved(values: torch.Tensor, computed_in: torch.dtype, tolerance: RegenerationTolerance,
           generator: torch.Generator) -> torch.Tensor:
    """`values` with MOVED_SHARE of its finite elements one or two ulps (of `computed_in`) away,
    each only where the move stays within `tolerance`; at least one element moves when any can."""
    if values.numel() == 0:
        return values.clone()
    steps = torch.randint(1, 3, values.shape, generator=generator)
    direction = torch.where(torch.rand(values.shape, generator=generator) < 0.5, -1.0, 1.0)
    chosen = torch.rand(values.shape, generator=generator) < MOVED_SHARE
    narrow = values.to(computed_in)
    away = torch.full_like(narrow, float("inf")) * direction.to(narrow.dtype)
    one_ulp = torch.nextafter(narrow, away)
    moved = torch.where(steps == 2, torch.nextafter(one_ulp, away), one_ulp)
    moved = moved.to(values.dtype)
    allowed = tolerance.atol + tolerance.rtol * values.double().abs()
    inside = (moved.double() - values.double()).abs() <= allowed
    usable = inside & torch.isfinite(values) & torch.isfinite(moved) & (moved != values)
    if usable.any() and not (chosen & usable).any():
        chosen = chosen | (usable & (torch.cumsum(usable.flatten().int(), 0) == 1).reshape(values.shape))
    return torch.where(chosen & usable, moved, values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.golden.foreign_goldens",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="the folder to write (created; files in it are replaced)")
    parser.add_argument("--source", type=Path, default=None, help="the golden folder to copy (default: the "
                        "repository's)")
    parser.add_argument("--seed", type=int, default=0, help="which elements move (default 0)")
    arguments = parser.parse_args(argv)
    labels = make_foreign_goldens(arguments.out_dir, arguments.source, arguments.seed)
    print(f"{len(labels)} goldens moved as another CPU would move them -> {arguments.out_dir} "
          f"(use HARNESS_GOLDEN_DIR={arguments.out_dir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
