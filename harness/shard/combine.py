"""`report merge` of shards: the report dirs of one environment's shards joined into it.

A shard's report.json carries environment.shard (harness.shard.identity). The inputs of one
environment that carry it are joined into one `EnvironmentReport` when
- every shard 1..N is there, once (a missing one is named: its cells would silently be absent),
- all ran the same "run" (commit, matrix file, goldens, selection, cost source) with the same
  torch, deepspeed and Python (one environment; the host may differ),
- no cell is in two shards, and together they cover every place of the selection.
The joined cells are in the selection's order, so the environment reads as the unsharded run's
report (same cells, statuses, records); its environment block is the first shard's with "shard"
replaced by "shards" (each shard's dir, host, cells, planned seconds) and "shard_run" (what they
all ran), the start-ups added up and every host named.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import ReportDirError, UsageError, explain
from harness.layout.report_dir import ReportDir
from harness.report.merged_report import EnvironmentReport

SAME_ENVIRONMENT = ("torch", "deepspeed", "python")  # environment keys every shard must share
_VALID = "every shard of one run once: the report dirs of `python -m harness run --shard K/N` for K = 1..N"


@dataclass(frozen=True)
class _Shard:
    report: EnvironmentReport
    index: int
    count: int
    cells: tuple[str, ...]
    positions: tuple[int, ...]
    selected: int
    run: dict[str, Any]

    @property
    def label(self) -> str:
        return f"shard {self.index}/{self.count} ({str(self.report.directory)!r})"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _read_block(report: EnvironmentReport) -> _Shard | None:
    """The report's shard entry, checked; None for an unsharded run."""
    block = report.environment.get("shard")
    if block is None:
        return None
    try:
        shard = _Shard(report, block["index"], block["count"], tuple(block["cells"]),
                       tuple(block["positions"]), block["selected"], dict(block["run"]))
        sound = (_is_int(shard.index) and _is_int(shard.count) and 1 <= shard.index <= shard.count
                 and _is_int(shard.selected) and len(shard.cells) == len(shard.positions)
                 and all(isinstance(c, str) for c in shard.cells)
                 and all(_is_int(p) and 0 <= p < shard.selected for p in shard.positions))
    except (KeyError, TypeError, ValueError):
        sound = False
    if not sound:
        raise ReportDirError(explain(
            f"report dir {str(report.directory)!r}",
            f"its {ReportDir.REPORT_JSON}'s environment.shard is not what "
            "`python -m harness run --shard K/N` writes (index, count, cells, positions, selected, run)",
            _VALID, "rerun that shard to rewrite it"))
    return shard


def _refuse(given: str, why: str, fix: str) -> UsageError:
    return UsageError(explain(given, why, _VALID, fix))


def _check_same_run(shards: Sequence[_Shard]) -> None:
    first = shards[0]
    for shard in shards[1:]:
        if shard.count != first.count:
            raise _refuse(f"{first.label} and {shard.label}", "they split the selection into different "
                          "numbers of shards", "run every shard with the same N and pass the report dirs of "
                          "one run")
        for key in sorted(set(first.run) | set(shard.run)):
            if first.run.get(key) != shard.run.get(key):
                raise _refuse(f"{first.label} and {shard.label}", f"they ran different {key} "
                              f"({first.run.get(key)!r} and {shard.run.get(key)!r}), so they are parts of "
                              "different runs", "rerun the shards from one commit, matrix file and goldens, "
                              "with the same selection and --shard-costs")
        for key in SAME_ENVIRONMENT:
            ours, theirs = first.report.environment.get(key), shard.report.environment.get(key)
            if ours != theirs:
                raise _refuse(f"{first.label} and {shard.label}", f"they ran {key} {ours!r} and {theirs!r}, "
                              "so they are not one environment", "run every shard in the same environment")


def _check_cover(name: str, shards: Sequence[_Shard]) -> None:
    by_index: dict[int, _Shard] = {}
    for shard in shards:
        if shard.index in by_index:
            raise _refuse(f"{by_index[shard.index].label} and {shard.label}", f"both are shard "
                          f"{shard.index}/{shard.count} of environment {name!r}",
                          "pass each shard's report dir once")
        by_index[shard.index] = shard
    count = shards[0].count
    missing = [f"{k}/{count}" for k in range(1, count + 1) if k not in by_index]
    if missing:
        held = ", ".join(f"{k}/{count}" for k in sorted(by_index))
        named = ", ".join(missing)
        raise _refuse(f"the shards of environment {name!r} ({held})", f"shard(s) {named} are missing, and "
                      "their cells with them", f"pass the report dir of shard(s) {named} too (if its job "
                      f"failed before writing a report, rerun it with --shard {missing[0]})")
    owner: dict[str, _Shard] = {}
    places: set[int] = set()
    for shard in shards:
        for cell_id in shard.cells:
            if cell_id in owner:
                raise _refuse(f"{owner[cell_id].label} and {shard.label}", f"both ran cell {cell_id}: the "
                              "shards overlap (planned from different selections or costs)",
                              "rerun the shards with the same selection and --shard-costs")
            owner[cell_id] = shard
        places.update(shard.positions)
    if places != set(range(shards[0].selected)) or len(places) != len(owner):
        raise _refuse(f"the shards of environment {name!r}", f"they hold {len(owner)} cell(s) at "
                      f"{len(places)} place(s) of a selection of {shards[0].selected}",
                      "rerun the shards with the same selection and --shard-costs")
    for shard in shards:
        extra = [r.id for r in shard.report.results if owner.get(r.id) is not shard]
        if extra:
            raise _refuse(shard.label, f"its report holds cell {extra[0]}, which is not in its shard's cells",
                          "rerun that shard to rewrite its report")


def _startup(shards: Sequence[_Shard]) -> dict[str, Any] | None:
    """Every shard's launches' start-up, added up (DeepSpeed's op build: the longest one)."""
    parts: list[dict[str, Any]] = [s.report.environment["startup"] for s in shards
                                   if isinstance(s.report.environment.get("startup"), dict)]
    if not parts:
        return None
    ops = [float(p["deepspeed_ops_s"]) for p in parts if p.get("deepspeed_ops_s") is not None]
    return {"launches": sum(int(p.get("launches") or 0) for p in parts),
            "total_s": round(sum(float(p.get("total_s") or 0.0) for p in parts), 3),
            "deepspeed_ops_s": max(ops) if ops else None,
            "per_launch": [entry for p in parts for entry in p.get("per_launch") or []]}


def _environment(shards: Sequence[_Shard]) -> dict[str, Any]:
    environment = {k: v for k, v in shards[0].report.environment.items() if k != "shard"}
    hosts = dict.fromkeys(str(s.report.environment.get("hostname", "?")) for s in shards)
    environment["hostname"] = ", ".join(hosts)
    environment["startup"] = _startup(shards)
    interrupted = [f"shard {s.index}/{s.count} {s.report.environment['interrupted']}" for s in shards
                   if s.report.environment.get("interrupted")]
    if interrupted:
        environment["interrupted"] = "; ".join(interrupted)
    else:
        environment.pop("interrupted", None)
    environment["shards"] = [{"index": s.index, "count": s.count, "directory": str(s.report.directory),
                              "hostname": s.report.environment.get("hostname"), "cells": len(s.cells),
                              "estimated_s": s.report.environment["shard"].get("estimated_s")}
                             for s in shards]
    environment["shard_run"] = shards[0].run
    return environment


def _join(name: str, shards: list[_Shard]) -> EnvironmentReport:
    shards.sort(key=lambda s: s.index)
    _check_same_run(shards)
    _check_cover(name, shards)
    place = {cell_id: p for s in shards for cell_id, p in zip(s.cells, s.positions, strict=True)}
    results = sorted((r for s in shards for r in s.report.results), key=lambda r: place[r.id])
    record_dirs = {r.id: s.report.directory for s in shards for r in s.report.results}
    return EnvironmentReport(name=name, directory=shards[0].report.directory,
                             environment=_environment(shards), results=results,
                             shard_dirs=[s.report.directory for s in shards], record_dirs=record_dirs)


def join_shards(inputs: Sequence[EnvironmentReport]) -> list[EnvironmentReport]:
    """`inputs` with each environment's shards joined into one, where its first shard was."""
    shards: dict[str, list[_Shard]] = {}
    unsharded: dict[str, EnvironmentReport] = {}
    for report in inputs:
        shard = _read_block(report)
        if shard is None:
            unsharded.setdefault(report.name, report)
        else:
            shards.setdefault(report.name, []).append(shard)
    for name, group in shards.items():
        if name in unsharded:
            whole, first = unsharded[name].directory, group[0].report.directory
            raise _refuse(f"report dirs {str(whole)!r} and {str(first)!r}", f"both hold environment "
                          f"{name!r}, the first a whole run, the second {group[0].label}",
                          "pass either the whole run's report dir or every shard's, not both")
    joined = {name: _join(name, group) for name, group in shards.items()}
    out: list[EnvironmentReport] = []
    placed: set[str] = set()
    for report in inputs:
        if report.name not in joined:
            out.append(report)
        elif report.name not in placed:
            out.append(joined[report.name])
            placed.add(report.name)
    return out
