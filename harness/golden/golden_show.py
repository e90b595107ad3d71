"""`python -m harness golden --show TASK`: a golden's numbers, readable.

What a person needs to judge a golden at a glance: where and for what it was made, the loss of
every step, the learning rates, skipped steps and loss scales, and each eval output and weight
tensor as dtype, shape, statistics and its first values. Reads only; nothing is recomputed.
"""

from __future__ import annotations

from pathlib import Path

import torch

from harness.golden.golden_check import machine_line
from harness.record.record_format import Record

FIRST_VALUES = 4  # values printed per tensor


def show_golden(record: Record, stem: Path) -> list[str]:
    meta = record.meta.get("golden", {})
    fields = meta.get("task", {})
    lines = [
        f"{stem.name}  ({stem.with_name(stem.name + '.json')})",
        f"  task {record.task!r} at {record.precision}, made by {meta.get('made_by', 'unknown')}",
        f"  made on {machine_line(meta.get('made_on'))}; versions "
        + ", ".join(f"{k} {v}" for k, v in sorted(record.fingerprint.versions.items())),
        f"  definition sha256 {str(meta.get('task_definition_hash', '?'))[:16]}..., data sha256 "
        f"{str(meta.get('data_sha256', '?'))[:16]}..., seed {meta.get('seed', '?')}",
    ]
    if fields:
        lines.append("  fields: " + ", ".join(f"{k}={v}" for k, v in fields.items() if k != "name"))
    lines.append(f"  losses ({len(record.losses)} micro-steps, the global mean of each):")
    lines += _columns(record.losses, "step")
    lines.append(f"  learning rates ({len(record.lrs)} optimizer steps, one per param group):")
    lines += _columns([" ".join(f"{lr:.6g}" for lr in group) for group in record.lrs], "step")
    lines.append(f"  skipped steps: {record.skipped_steps or 'none'}")
    if record.loss_scales:
        lines.append("  loss scales after each optimizer step: "
                     + " ".join(f"{s:g}" for s in record.loss_scales))
    lines.append(f"  eval outputs ({len(record.eval_outputs)}):")
    lines += [_tensor_line(name, t) for name, t in sorted(record.eval_outputs.items())]
    lines.append(f"  final state dict ({len(record.state_dict)} tensors):")
    lines += [_tensor_line(name, t) for name, t in record.state_dict.items()]
    return lines


def _columns(values: list[float] | list[str], unit: str, per_row: int = 4) -> list[str]:
    cells = [f"{unit} {i:>3}: {v:<12.7g}" if isinstance(v, float) else f"{unit} {i:>3}: {v:<12}"
             for i, v in enumerate(values)]
    return ["    " + "  ".join(cells[i:i + per_row]).rstrip() for i in range(0, len(cells), per_row)]


def _tensor_line(name: str, tensor: torch.Tensor) -> str:
    values = tensor.detach().double().flatten()
    shape = "x".join(str(s) for s in tensor.shape) or "scalar"
    dtype = str(tensor.dtype).removeprefix("torch.")
    if values.numel() == 0:
        return f"    {name:<28} {dtype:<9} {shape:<10} (empty)"
    first = ", ".join(f"{v:.5g}" for v in values[:FIRST_VALUES].tolist())
    more = ", ..." if values.numel() > FIRST_VALUES else ""
    return (f"    {name:<28} {dtype:<9} {shape:<10} min {values.min().item():<10.4g} max "
            f"{values.max().item():<10.4g} mean {values.mean().item():<10.4g} [{first}{more}]")
