"""The record a script's Accelerator wrote (accelerate_core/recording.py) as a harness Record.

Quantities: `losses` (the loss given to each `accelerator.backward`, averaged over processes),
`lrs` (every param group's learning rate at each backward, so per micro-step),
`eval/<file:line>[/path]` (each gather call site's results, concatenated), `state_dict/<key>`
(the last `get_state_dict`). A script has no loss-scale series of its own: loss scaling shows in the
evidence instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from accelerate_core.recording import RECORD_FORMAT
from harness.errors import RecordError, explain
from harness.plan.cell import Cell
from harness.record.record_format import Fingerprint, Record


def load_script_record(path: Path, cell: Cell) -> Record:
    fix = ("make sure the script calls accelerator.backward, gathers its eval outputs with "
           "accelerator.gather / gather_for_metrics and ends with accelerator.get_state_dict(model), "
           "and that it exits normally")
    if not path.exists():
        raise RecordError(explain(f"script record {path}", "the script wrote none (it did not create an "
                                  "Accelerator, or did not exit normally)", "a record written at exit", fix))
    try:
        body = torch.load(path, weights_only=True)
        if body.get("format") != RECORD_FORMAT:
            raise ValueError(f"format {body.get('format')!r}, expected {RECORD_FORMAT}")
        evidence = json.loads(body["evidence"])
        losses = body["losses"].tolist()
        lrs = [step.tolist() for step in body["lrs"]]
        gathered = dict(body["gathered"])
        state_dict = dict(body["state_dict"])
    except (OSError, RuntimeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RecordError(explain(f"script record {path}", f"it is unreadable ({exc})",
                                  "a file written by accelerate_core.recording", "rerun the cell")) from None
    if not losses or not all(lrs):
        raise RecordError(explain(
            f"script record {path}", "it holds no training step" if not losses else
            "no optimizer was prepared through the Accelerator (no learning rates)",
            "a script that prepares its optimizer and calls accelerator.backward", fix))
    return Record(
        task=cell.task, precision=cell.precision, losses=losses, lrs=lrs, skipped_steps=[], loss_scales=[],
        eval_outputs=gathered, state_dict=state_dict, meta={"evidence": evidence},
        fingerprint=Fingerprint.here(device=cell.device, world_size=int(evidence.get("world_size", 0)),
                                     seed=0, precision=cell.precision, strategy=cell.strategy,
                                     emulated=bool(evidence.get("emulated", False))),
    )
