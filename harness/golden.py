"""Golden baselines: `matrix/golden/<task>-<precision>.{safetensors,json}`, made by the plain
PyTorch reference and checked in.

A golden is a Record whose JSON `meta.golden` also holds the task's definition hash, the sha256 of
its data and the seed. Loading one verifies the tensors' sha256 (Record.load) and that it was
made for the task as defined now: a stale or tampered golden is an error, never a comparison.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_tensors

from harness.record import Record, RecordError, explain
from harness.reference import PRECISIONS, train_reference
from harness.tasks import get_task, task_names
from harness.tasks.base import Task, describe

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "matrix" / "golden"
_FIX_UPDATE = "regenerate it with `python -m harness golden --update` (and review the diff)"


class GoldenError(Exception):
    """A golden is missing, truncated, tampered with, or made for another task definition."""


def golden_stem(task_name: str, precision: str, golden_dir: Path | None = None) -> Path:
    return (golden_dir or GOLDEN_DIR) / f"{task_name}-{precision}"


def load_golden(task_name: str, precision: str, golden_dir: Path | None = None) -> Record:
    stem = golden_stem(task_name, precision, golden_dir)
    try:
        task = get_task(task_name)
    except KeyError as exc:
        raise GoldenError(str(exc.args[0])) from None
    if precision not in PRECISIONS:
        raise GoldenError(explain(f"golden precision {precision!r}", "there are no goldens for it",
                                  PRECISIONS, "ask for one of these"))
    if not stem.with_name(stem.name + ".json").exists():
        raise GoldenError(explain(f"golden {stem}.json", f"there is no golden for task "
                                  f"{task_name!r} at {precision}", "an existing golden file",
                                  _FIX_UPDATE))
    try:
        record = Record.load(stem)
    except RecordError as exc:
        raise GoldenError(f"golden {stem.name} is unusable (truncated or tampered with?): {exc}") from None
    meta = record.meta.get("golden", {})
    checks = (
        ("task", record.task, task_name),
        ("precision", record.precision, precision),
        ("task definition hash", meta.get("task_definition_hash"), task.definition_hash()),
        ("data sha256", meta.get("data_sha256"), task.data_sha256()),
    )
    for what, found, expected in checks:
        if found != expected:
            raise GoldenError(explain(
                f"golden {stem.name}: {what} {_short(found)}",
                f"the task {task_name!r} as defined now has {_short(expected)}: the golden was made "
                "for another task definition (the task's code, fields or data changed since)",
                "a golden made from the current task", _FIX_UPDATE))
    return record


def make_golden(task: Task, precision: str) -> Record:
    """The golden for `task` at `precision`, in memory."""
    record = train_reference(task, precision)
    record.meta = {"golden": {
        "task_definition_hash": task.definition_hash(),
        "data_sha256": task.data_sha256(),
        "seed": task.seed,
        "task": describe(task),
        "made_by": "harness.reference.train_reference (plain PyTorch, one process, one thread)",
    }}
    return record


def check_goldens(tasks: Iterable[str] | None = None, precisions: Iterable[str] | None = None,
                  golden_dir: Path | None = None) -> list[str]:
    """Regenerate in memory and list every difference from the files; [] = bit for bit."""
    lines: list[str] = []
    for name, precision in _selection(tasks, precisions):
        lines.extend(_differences(name, precision, make_golden(get_task(name), precision), golden_dir))
    return lines


def update_goldens(tasks: Iterable[str] | None = None, precisions: Iterable[str] | None = None,
                   golden_dir: Path | None = None) -> list[str]:
    """Rewrite the goldens that differ from a fresh reference run; print and return what changed."""
    changed: list[str] = []
    for name, precision in _selection(tasks, precisions):
        record = make_golden(get_task(name), precision)
        differences = _differences(name, precision, record, golden_dir)
        if differences:
            record.save(golden_stem(name, precision, golden_dir))
            changed.extend(differences)
    for line in changed:
        print(line)
    return changed


def owns_golden(task: Task) -> bool:
    """False for a task that borrows another's golden (`golden_of`, e.g. the fault canaries,
    which are `regression` plus a fault and are judged against regression's golden)."""
    return getattr(task, "golden_of", None) in (None, task.name)


def _selection(tasks: Iterable[str] | None, precisions: Iterable[str] | None) -> list[tuple[str, str]]:
    names = list(tasks) if tasks is not None else [n for n in task_names() if owns_golden(get_task(n))]
    chosen = list(precisions) if precisions is not None else list(PRECISIONS)
    for precision in chosen:
        if precision not in PRECISIONS:
            raise GoldenError(explain(f"precision {precision!r}", "goldens exist per precision",
                                      PRECISIONS, "pick from these"))
    for name in names:
        get_task(name)  # a clear KeyError naming the valid tasks
    return [(name, precision) for name in names for precision in chosen]


def _differences(name: str, precision: str, fresh: Record, golden_dir: Path | None) -> list[str]:
    stem = golden_stem(name, precision, golden_dir)
    label = stem.name
    json_path = stem.with_name(stem.name + ".json")
    tensor_path = stem.with_name(stem.name + ".safetensors")
    if not json_path.exists() or not tensor_path.exists():
        return [f"{label}: new (no golden file yet)"]
    data = fresh.tensor_bytes()
    lines = []
    on_disk = tensor_path.read_bytes()
    if on_disk != data:
        lines.extend(_tensor_differences(label, fresh.tensors(), on_disk))
    if json_path.read_text() != fresh.json_text(data, stem.name):
        lines.extend(_json_differences(label, json.loads(json_path.read_text()),
                                       json.loads(fresh.json_text(data, stem.name))))
    return lines


def _tensor_differences(label: str, fresh: dict[str, torch.Tensor], on_disk: bytes) -> list[str]:
    try:
        old = load_tensors(on_disk)
    except Exception as exc:  # a truncated file raises safetensors' own error type
        return [f"{label}: tensors file unreadable ({exc})"]
    lines = []
    for key in sorted(set(old) | set(fresh)):
        if key not in old or key not in fresh:
            lines.append(f"{label}: {key} {'added' if key in fresh else 'removed'}")
        elif old[key].shape != fresh[key].shape or old[key].dtype != fresh[key].dtype:
            lines.append(f"{label}: {key} shape/dtype {tuple(old[key].shape)} {old[key].dtype} -> "
                         f"{tuple(fresh[key].shape)} {fresh[key].dtype}")
        elif not torch.allclose(old[key], fresh[key], rtol=0.0, atol=0.0, equal_nan=True):
            diff = (old[key].double() - fresh[key].double()).abs().max().item()
            lines.append(f"{label}: {key} changed (max |diff| {diff:.3g})")
    return lines or [f"{label}: tensors file bytes differ (same tensors: layout or header changed)"]


def _json_differences(label: str, old: dict[str, Any], new: dict[str, Any], path: str = "") -> list[str]:
    lines = []
    for key in sorted(set(old) | set(new)):
        where = f"{path}{key}"
        if key == "tensors_sha256":
            continue  # follows from the tensors, reported above
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            lines.extend(_json_differences(label, a, b, where + "."))
        elif a != b:
            lines.append(f"{label}: {where} {_short(a)} -> {_short(b)}")
    return lines


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
