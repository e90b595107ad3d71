"""Where a run starts and stops: the two halves of a resume cell, on the rank (docs/resume.md).

A source trains the first `step` optimizer steps of a task, saves with
`accelerator.save_state(dir)` and stops there; a destination builds the same task, calls
`accelerator.load_state(dir)` and finishes the run from the position the core restored:
`accelerator.skip_first_batches(tr_data)` (no count: the restored position, as in
docs/checkpoint-format.md) for the rest of the epoch, then whole epochs. The harness never tells
the destination where to continue; it records where the core said, and the judge checks that
against where the source stopped (harness.judge.resume_verdict).

A plain cell's run is `RunSpan()`: from the start to the end, nothing saved or loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from accelerate_core import Accelerator
from harness.plan.cell import Cell, ResumeCell, SourceCell
from harness.plan.resume_cells import ResumePoint, checkpoints_dir
from harness.record.record_format import Record


@dataclass
class RunSpan:
    """The part of a task's run that this cell trains. `saves_to`: stop after `step` optimizer
    steps and save there (a source); `loads_from`: start from that checkpoint (a destination)."""

    step: int = 0
    saves_to: Path | None = None
    loads_from: Path | None = None
    stopped: bool = False  # a source has saved and left its loop
    restored: dict[str, Any] = field(default_factory=dict)  # what the core restored (evidence)

    @property
    def checkpointed(self) -> bool:
        return self.saves_to is not None or self.loads_from is not None

    @property
    def first_step(self) -> int:
        """The optimizer step (0-based) this run's first optimizer step is in the whole run."""
        return self.step if self.loads_from is not None else 0

    def restore(self, accelerator: Accelerator, tr_data: Any) -> int:
        """load_state, then return the epoch to continue in (the core's restored one)."""
        if self.loads_from is None:
            return 0
        accelerator.load_state(self.loads_from)
        self.restored = {"checkpoint": str(self.loads_from), "epoch": int(tr_data.epoch),
                         "manifest_writer": _manifest_writer(self.loads_from)}
        return int(tr_data.epoch)

    def batches(self, accelerator: Accelerator, tr_data: Any, epoch: int, first_epoch: int
                ) -> Iterable[tuple[int, Any]]:
        """(step within the epoch, batch) of this epoch: the rest of it from the restored
        position in the first epoch of a destination, the whole epoch otherwise."""
        if self.loads_from is None or epoch != first_epoch:
            return enumerate(tr_data)
        rest = accelerator.skip_first_batches(tr_data)  # no count: the position load_state restored
        skip = int(rest.skip)
        self.restored["batch"] = skip
        return _numbered(rest, skip)

    def stop_and_save(self, accelerator: Accelerator, optimizer_steps: int) -> bool:
        """After each optimizer step: True once a source has taken its steps and saved."""
        if self.saves_to is None or optimizer_steps != self.step:
            return False
        accelerator.save_state(self.saves_to)
        self.stopped = True
        return True

    def evidence(self) -> dict[str, Any] | None:
        if self.saves_to is not None:
            return {"role": "source", "saved_after_step": self.step, "checkpoint": str(self.saves_to)}
        if self.loads_from is not None:
            return {"role": "destination", "resumed_after_step": self.step, **self.restored}
        return None


def _numbered(batches: Iterable[Any], start: int) -> Iterator[tuple[int, Any]]:
    return enumerate(batches, start=start)


def _manifest_writer(checkpoint: Path) -> dict[str, Any] | None:
    """The checkpoint's own statement of what wrote it (docs/checkpoint-format.md), or None."""
    try:
        writer = json.loads((checkpoint / "manifest.json").read_text(encoding="utf-8")).get("writer")
    except (OSError, ValueError, AttributeError):
        return None
    return writer if isinstance(writer, dict) else None


def combine(source: Record, resumed: Record, point: ResumePoint, source_name: str) -> Record:
    """The whole run as the two halves measured it: the source's losses, learning rates, skips
    and loss scales up to the checkpoint, the destination's after it, and the destination's eval
    outputs and final weights. Compared with the golden like an uninterrupted run's record."""
    meta = dict(resumed.meta)
    evidence = dict(meta.get("evidence") or {})
    resume = dict(evidence.get("resume") or {})
    resume.update(source=source_name, point={"step": point.step, "epoch": point.epoch,
                                             "batch": point.batch, "micro_steps": point.micro_steps},
                  source_losses=len(source.losses), source_fingerprint=source.fingerprint.__dict__,
                  source_evidence=source.meta.get("evidence"))
    evidence["resume"] = resume
    meta["evidence"] = evidence
    return replace(
        resumed,
        losses=list(source.losses) + list(resumed.losses),
        lrs=list(source.lrs) + list(resumed.lrs),
        skipped_steps=sorted(set(source.skipped_steps) | set(resumed.skipped_steps)),
        loss_scales=list(source.loss_scales) + list(resumed.loss_scales),
        meta=meta,
    )


def span_of(cell: Cell, records_dir: Path) -> RunSpan:
    """The part of the run a cell trains: a SourceCell saves, a ResumeCell loads, others neither."""
    if isinstance(cell, SourceCell):
        return RunSpan(step=cell.save_after, saves_to=checkpoints_dir(records_dir) / cell.id)
    if isinstance(cell, ResumeCell):
        return RunSpan(step=cell.resume_step, loads_from=checkpoints_dir(records_dir) / cell.checkpoint_name)
    return RunSpan()


def with_source(cell: Cell, record: Record, records_dir: Path, task: Any) -> Record:
    """A destination's record joined to its source's (written before the destination launched);
    any other record as it is."""
    if not isinstance(cell, ResumeCell):
        return record
    source = Record.load(records_dir / cell.checkpoint_name, fix="rerun the resume cell (its source first)")
    return combine(source, record, ResumePoint.of(task, cell.resume_step), cell.checkpoint_name)
