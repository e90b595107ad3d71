"""The `[resume]` section of matrix.toml: which resume cells exist (docs/resume.md).

    [resume.steps]                 # optimizer steps a source takes before it saves, per task
    classifier = 5
    [[resume.grid]]                # cells: tasks x precisions x (from x to, or listed pairs)
    tasks = ["classifier"]
    precisions = ["fp32"]
    from = ["golden", "cpu1-single", "cpu2-zero3"]     # "golden": the reference's checkpoint
    to = ["cpu1-single", "cpu2-ddp"]
    # or: pairs = ["cpu2-zero3:cpu2-ddp", "cpu2-ddp:cpu2-zero3"]
    [[resume.expected]]            # a pair that cannot work, with its reason (as [[expected]])
    from = ["cpu2-zero3"]
    to = ["cpu1-single"]
    reason = "..."

Resume cells are opt-in (selection.resume_requested): `-k resume`, `-m resume`, or a -k naming a
resume id (it holds ':'). Each end must be a launch shape and strategy the matrix declares.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.layout.report_dir import ReportDir
from harness.plan.cell import GOLDEN_SOURCE, PRECISIONS, RESUME_SEPARATOR, Cell, ResumeCell
from harness.plan.matrix_entries import Expected, Match, bad, check_value, only_keys, parse_expected

GRID_KEYS = ("tasks", "precisions", "from", "to", "pairs")
EXPECTED_KEYS = ("tasks", "precisions", "from", "to", "status", "match", "reason", "environments")


@dataclass(frozen=True)
class ResumePoint:
    """Where a checkpoint taken after `step` optimizer steps sits in a task's run, computed from
    the task alone: the core must restore this position (the judge checks that it did)."""

    step: int  # optimizer steps taken before the checkpoint
    epoch: int  # the epoch the next micro-step belongs to
    batch: int  # micro-steps of that epoch already taken (the next batch's index)
    micro_steps: int  # micro-steps over the whole run before it (= losses recorded before it)

    @classmethod
    def of(cls, task: Any, step: int) -> ResumePoint:
        """`task`: a harness.tasks.base.Task (its step counts and accumulation)."""
        epoch, within = divmod(step, task.optimizer_steps_per_epoch)
        batch = min(within * task.gradient_accumulation_steps, task.micro_steps_per_epoch)
        return cls(step, epoch, batch, epoch * task.micro_steps_per_epoch + batch)

    @property
    def mid_epoch(self) -> bool:
        return self.batch > 0

    def describe(self) -> str:
        return f"optimizer step {self.step} (epoch {self.epoch}, batch {self.batch})"


def checkpoints_dir(records_dir: Path) -> Path:
    """A run's checkpoints live beside its records, in the report dir: `checkpoints/<name>/`,
    named by the SourceCell id (or `{task}-golden-{precision}@step{k}`)."""
    return ReportDir.checkpoints_beside(records_dir)


@dataclass(frozen=True)
class ResumeMatch(Match):
    """A pattern over resume cells: the task/precision `values` of Match, and the two ends."""

    sources: tuple[str, ...] = ()  # empty: any source
    destinations: tuple[str, ...] = ()  # "{device}{processes}-{strategy}"; empty: any

    def matches(self, cell: Cell) -> bool:
        if not isinstance(cell, ResumeCell) or not super().matches(cell):
            return False
        destination = f"{cell.device}{cell.processes}-{cell.strategy}"
        return (not self.sources or cell.source in self.sources) and (
            not self.destinations or destination in self.destinations)


def parse_resume(file: Path, body: Any, valid_axes: dict[str, Any], shape_names: list[str],
                 steps_of: dict[str, int]) -> tuple[list[ResumeCell], list[Expected]]:
    """The resume cells and their expected outcomes. `shape_names`: every declared
    "{device}{processes}-{strategy}"; `steps_of`: each task's optimizer steps over its run."""
    if not body:
        return [], []
    only_keys(file, "[resume]", body, ("steps", "grid", "expected"))
    steps = _steps(file, body.get("steps", {}), valid_axes, steps_of)
    cells: dict[str, ResumeCell] = {}
    for i, entry in enumerate(body.get("grid", [])):
        where = f"[[resume.grid]] #{i + 1}"
        only_keys(file, where, entry, GRID_KEYS)
        tasks = _names(file, where + ".tasks", entry.get("tasks"), "task", valid_axes)
        precisions = _names(file, where + ".precisions", entry.get("precisions"), "precision", valid_axes)
        for task in tasks:
            if task not in steps:
                raise bad(file, where + ".tasks", task, "it has no resume step in [resume.steps]",
                          sorted(steps), f"add `{task} = K` to [resume.steps]")
        pairs = _pairs(file, where, entry, shape_names)
        for task in tasks:
            for precision in precisions:
                for source, destination in pairs:
                    cell = ResumeCell.from_resume_id(
                        f"{task}-{source}-{precision}{RESUME_SEPARATOR}{destination}-{precision}",
                        steps[task])
                    cells.setdefault(cell.id, cell)
    expected = [_expected(file, i, entry, valid_axes, shape_names)
                for i, entry in enumerate(body.get("expected", []))]
    return list(cells.values()), expected


def _steps(file: Path, body: Any, valid_axes: dict[str, Any], steps_of: dict[str, int]) -> dict[str, int]:
    if not isinstance(body, dict):
        raise bad(file, "[resume.steps]", body, "it must be a table", "task = step pairs",
                  "write classifier = 5")
    for task, step in body.items():
        check_value(file, "[resume.steps]", "task", task, valid_axes)
        total = steps_of.get(task)
        if not isinstance(step, int) or isinstance(step, bool) or total is None or not 1 <= step < total:
            raise bad(file, f"[resume.steps].{task}", step,
                      "a source must save after at least one optimizer step and before the last",
                      f"a whole number in 1..{(total or 2) - 1} ({task} takes {total} optimizer steps)",
                      "pick a step inside the run, mid-epoch preferably")
    return dict(body)


def _names(file: Path, where: str, given: Any, axis: str, valid_axes: dict[str, Any]) -> list[str]:
    if not isinstance(given, list) or not given:
        raise bad(file, where, given, "it must be a non-empty list", f"{axis} values", "write a list")
    for value in given:
        check_value(file, where, axis, value, valid_axes)
        if axis == "precision" and value not in PRECISIONS:
            raise bad(file, where, value, "not a precision", PRECISIONS, "use one of them")
    return list(given)


def _pairs(file: Path, where: str, entry: dict[str, Any], shape_names: list[str]) -> list[tuple[str, str]]:
    if ("pairs" in entry) == ("from" in entry or "to" in entry):
        raise bad(file, where, sorted(k for k in entry if k in ("pairs", "from", "to")),
                  "a grid names its pairs one way", "`from` and `to` (every pair), or `pairs`",
                  "keep one of the two")
    if "pairs" in entry:
        pairs = []
        for text in entry["pairs"]:
            source, separator, destination = str(text).partition(RESUME_SEPARATOR)
            if not separator:
                raise bad(file, where + ".pairs", text, f"a pair is SOURCE{RESUME_SEPARATOR}DESTINATION",
                          shape_names, f'write e.g. "cpu2-zero3{RESUME_SEPARATOR}cpu1-single"')
            pairs.append((source, destination))
    else:
        pairs = [(s, d) for s in entry.get("from", []) for d in entry.get("to", [])]
    for source, destination in pairs:
        _end(file, where, source, [*shape_names, GOLDEN_SOURCE])
        _end(file, where, destination, shape_names)
    return pairs


def _end(file: Path, where: str, value: str, valid: list[str]) -> None:
    if value not in valid:
        raise bad(file, where, value, "not a launch shape and strategy of this matrix ([[shapes]])",
                  valid, "use one of them")


def _expected(file: Path, i: int, entry: Any, valid_axes: dict[str, Any], shape_names: list[str]) -> Expected:
    where = f"[[resume.expected]] #{i + 1}"
    only_keys(file, where, entry, EXPECTED_KEYS)
    for key, valid in (("from", [*shape_names, GOLDEN_SOURCE]), ("to", shape_names)):
        for value in entry.get(key, []):
            _end(file, f"{where}.{key}", value, valid)
    # The status / match / reason / environments of an [[expected]] entry, read by its own parser.
    plain = {k: v for k, v in entry.items() if k in ("status", "match", "reason", "environments")}
    plain.update({axis: entry[key] for key, axis in (("tasks", "task"), ("precisions", "precision"))
                  if key in entry})
    base = parse_expected(file, i, plain, valid_axes)
    match = ResumeMatch(base.match.values, tuple(entry.get("from", [])), tuple(entry.get("to", [])))
    return Expected(match, base.status, base.reason, base.environments, base.diagnosis)
