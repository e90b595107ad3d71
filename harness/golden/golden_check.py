"""Judging a regenerated golden against the checked-in one: bit-identical, reproduced within the
measured regeneration tolerance (another machine's last bits), changed (what and where), or new.

Only the numbers and what defines them (task hash, data, seed, versions) are compared; the
`made_on` machine description and the generation mode are reported, never compared: a golden
made on another CPU is the same golden when its numbers are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_tensors

from harness.golden.regeneration import RegenerationTolerance
from harness.record.record_format import Record

# Keys of meta.golden that describe where a golden was made, not what it is.
_DESCRIPTIVE = {"made_on", "generation_mode"}


class Reproduction(StrEnum):
    BIT_IDENTICAL = "bit-identical"
    WITHIN = "reproduced within"
    CHANGED = "changed"
    NEW = "new"


@dataclass(frozen=True)
class GoldenCheck:
    label: str  # e.g. "lm-fp32"
    reproduction: Reproduction
    tolerance: RegenerationTolerance
    differences: list[str] = field(default_factory=list)  # what moved (WITHIN) or changed (CHANGED)
    made_on: str = "unknown machine"
    checked_on: str = "unknown machine"
    rewritten: bool = False
    # Set when the regeneration is a half-precision golden bit-identical to the fp32 one
    # (harness.golden.precision_visible): the message; such a golden is never written.
    refused: str = ""

    @property
    def passed(self) -> bool:
        return not self.refused and self.reproduction in (Reproduction.BIT_IDENTICAL, Reproduction.WITHIN)

    def summary(self) -> str:
        if self.refused:
            return f"{self.label}: refused: {self.refused}"
        if self.reproduction is Reproduction.BIT_IDENTICAL:
            text = f"{self.label}: bit-identical"
        elif self.reproduction is Reproduction.WITHIN:
            text = (f"{self.label}: reproduced within {self.tolerance.describe()} "
                    f"(made on {self.made_on}, checked on {self.checked_on})")
        elif self.reproduction is Reproduction.NEW:
            text = f"{self.label}: new (no golden file yet)"
        else:
            text = f"{self.label}: changed (made on {self.made_on}, checked on {self.checked_on})"
        return text + (" -> rewritten" if self.rewritten else "")


def judge_regeneration(stem: Path, fresh: Record, tolerance: RegenerationTolerance) -> GoldenCheck:
    label = stem.name
    json_path, tensor_path = stem.with_name(label + ".json"), stem.with_name(label + ".safetensors")
    checked_on = machine_line(fresh.meta.get("golden", {}).get("made_on"))
    if not json_path.exists() or not tensor_path.exists():
        return GoldenCheck(label, Reproduction.NEW, tolerance, checked_on=checked_on)
    old_json = json.loads(json_path.read_text())
    made_on = machine_line(old_json.get("meta", {}).get("golden", {}).get("made_on"))
    fresh_bytes = fresh.tensor_bytes()
    changed = _definition_differences(label, _defining(old_json),
                                      _defining(json.loads(fresh.json_text(fresh_bytes, label))))
    on_disk = tensor_path.read_bytes()
    moved: list[str] = []
    if on_disk != fresh_bytes:
        tensor_changed, moved = _tensor_differences(label, fresh.tensors(), on_disk, tolerance)
        changed += tensor_changed
    if changed:
        return GoldenCheck(label, Reproduction.CHANGED, tolerance, changed + moved, made_on, checked_on)
    if moved:
        return GoldenCheck(label, Reproduction.WITHIN, tolerance, moved, made_on, checked_on)
    return GoldenCheck(label, Reproduction.BIT_IDENTICAL, tolerance, [], made_on, checked_on)


def machine_line(machine: Any) -> str:
    """'Intel(R) Xeon(R) Processor, AVX512, native fp16' from a `made_on` description."""
    if not isinstance(machine, dict):
        return "an unrecorded machine"
    cpu = machine.get("cpu", {})
    native = {True: "native fp16", False: "no native fp16"}.get(cpu.get("native_fp16"), "fp16 unknown")
    flags = cpu.get("flags", {})
    widest = next((f for f in ("avx512f", "avx2") if flags.get(f)), "no avx2")
    text = f"{cpu.get('model', 'unknown CPU')} ({widest}, {native})"
    caps = {k: v for k, v in machine.get("environment", {}).items() if "ISA" in k or "INSTRUCTIONS" in k}
    return text + ("".join(f" {k}={v}" for k, v in sorted(caps.items())) if caps else "")


def _defining(record_json: dict[str, Any]) -> dict[str, Any]:
    """The JSON minus what is derived (the tensors' and the JSON's own hash) or descriptive (where
    it was made)."""
    body = {k: v for k, v in record_json.items() if k not in ("tensors_sha256", "json_sha256")}
    meta = dict(body.get("meta", {}))
    meta["golden"] = {k: v for k, v in meta.get("golden", {}).items() if k not in _DESCRIPTIVE}
    body["meta"] = meta
    return body


def _definition_differences(label: str, old: dict[str, Any], new: dict[str, Any],
                            path: str = "") -> list[str]:
    lines = []
    for key in sorted(set(old) | set(new)):
        where = f"{path}{key}"
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            lines.extend(_definition_differences(label, a, b, where + "."))
        elif a != b:
            lines.append(f"{label}: {where} {short_repr(a)} -> {short_repr(b)}")
    return lines


def _tensor_differences(label: str, fresh: dict[str, torch.Tensor], on_disk: bytes,
                        tolerance: RegenerationTolerance) -> tuple[list[str], list[str]]:
    """(changed, moved within tolerance) lines, one per tensor that differs."""
    try:
        old = load_tensors(on_disk)
    except Exception as exc:  # a truncated file raises safetensors' own error type
        return [f"{label}: tensors file unreadable ({exc})"], []
    changed: list[str] = []
    moved: list[str] = []
    for key in sorted(set(old) | set(fresh)):
        if key not in old or key not in fresh:
            changed.append(f"{label}: {key} {'added' if key in fresh else 'removed'}")
        elif old[key].shape != fresh[key].shape or old[key].dtype != fresh[key].dtype:
            changed.append(f"{label}: {key} shape/dtype {tuple(old[key].shape)} {old[key].dtype} -> "
                           f"{tuple(fresh[key].shape)} {fresh[key].dtype}")
        elif not torch.equal(old[key], fresh[key]) and not _both_nan_equal(old[key], fresh[key]):
            a, b = old[key].double(), fresh[key].double()
            diff = (a - b).abs().max().item()
            inside = torch.allclose(b, a, rtol=tolerance.rtol, atol=tolerance.atol, equal_nan=True)
            line = f"{label}: {key} changed (max |diff| {diff:.3g})"
            (moved if inside else changed).append(line)
    if not changed and not moved:
        changed.append(f"{label}: tensors file bytes differ (same tensors: layout or header changed)")
    return changed, moved


def _both_nan_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.allclose(a.double(), b.double(), rtol=0.0, atol=0.0, equal_nan=True))


def short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
