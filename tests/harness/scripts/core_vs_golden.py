"""Run on every rank of a launch: train tasks through the core and judge each record against its
golden with the matrix's tolerance. Rank 0 writes one JSON line per run to --out.

    python -m torch.distributed.run --nproc_per_node 2 core_vs_golden.py \
        --tasks regression,lm --runs fp32:ddp,bf16:zero3 --out results.jsonl
"""

from __future__ import annotations

import argparse
import json
import traceback
from pathlib import Path

from harness.rank.loop import train_with_core
from harness.spec.matrix import load_matrix
from harness.tasks import get_task
from harness.truth.compare import compare_record, diagnose
from harness.truth.golden import load_golden


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", required=True)
    parser.add_argument("--runs", required=True, help="precision:strategy,... (strategy ddp|single|zeroN)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    lines = []
    for run in args.runs.split(","):
        precision, strategy = run.split(":")
        stage = int(strategy[4:]) if strategy.startswith("zero") else None
        for name in args.tasks.split(","):
            entry = {"task": name, "precision": precision, "strategy": strategy}
            try:
                record = train_with_core(get_task(name), precision=precision, cpu=True, zero_stage=stage,
                                         cpu_fp16_emulation=precision == "fp16" and stage is not None)
            except Exception:
                entry.update(ok=False, error=traceback.format_exc(limit=4))
                lines.append(entry)
                continue
            if record is None:
                continue
            golden, tolerance = load_golden(name, precision), load_matrix().tolerance_for(precision, strategy)
            comparisons = compare_record(record, golden, tolerance)
            cell = f"{name}-cpu{record.fingerprint.world_size}-{strategy}-{precision}"
            entry.update(ok=all(c.ok for c in comparisons), diagnosis=diagnose(cell, comparisons, record),
                         strategy_recorded=record.fingerprint.strategy, emulated=record.fingerprint.emulated,
                         skipped=record.skipped_steps, worst=max(c.tolerance_used for c in comparisons))
            lines.append(entry)
    if lines:  # only rank 0 holds records; other ranks only report their errors
        with open(args.out, "a") as handle:
            handle.writelines(json.dumps(entry) + "\n" for entry in lines)


if __name__ == "__main__":
    main()
