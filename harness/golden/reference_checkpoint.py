"""The golden checkpoint: the plain-PyTorch reference's state after k optimizer steps, written in
the backend-neutral checkpoint format (docs/checkpoint-format.md) with safetensors and json alone.

Like harness.golden.reference, this imports nothing from accelerate_core: a resume cell
`{task}-golden-{precision}:{destination}` loads this checkpoint through the core's `load_state`
and must finish the run to the golden. If it does on every backend, the format is defined by
its data (this writer follows the document, not the core's code), not by the core that reads it.
"""

from __future__ import annotations

import hashlib
import json
import platform
import random
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save as save_tensors

from harness.atomic_files import write_bytes_atomic, write_text_atomic
from harness.errors import HarnessError, explain
from harness.golden.reference import ReferenceState, train_reference
from harness.record.record_format import Record
from harness.tasks.base import Task
from harness.tasks.loader_options import training_loader_options
from harness.tasks.shuffled import ShuffledTask
from harness.tasks.weighted import WeightedSamplingTask

FORMAT = "accelerate_core.checkpoint"
FORMAT_VERSION = 3  # docs/checkpoint-format.md: each file's size and sha256, dataloader orders
MIXED_PRECISION = {"fp32": "no", "fp16": "fp16", "bf16": "bf16"}


def write_golden_checkpoint(task: Task, precision: str, step: int, directory: Path) -> Record:
    """Train the reference for `step` optimizer steps, write its checkpoint into `directory`
    and return the record of those steps (losses, lrs, skips, loss scales; no eval, no weights)."""
    if isinstance(task, (ShuffledTask, WeightedSamplingTask)):
        # Its progress.json would need the pass's order and the generator's state, which a plain
        # DataLoader does not hand out.
        drawn = "shuffled" if isinstance(task, ShuffledTask) else "drawn by a custom sampler"
        raise HarnessError(explain(
            f"a golden checkpoint of task {task.name!r}", f"its training data is {drawn}, and this writer "
            "records only loaders that run in order", "a task whose training DataLoader runs in order",
            "leave this task out of [[resume.grid]] tasks"))

    def save(state: ReferenceState) -> None:
        write_checkpoint(directory, task, precision, state)

    record = train_reference(task, precision, stop_at=(step, save))
    record.meta["evidence"] = {"strategy": "reference", "checkpoint": str(directory),
                               "saved_after_step": step}
    return record


def write_checkpoint(directory: Path, task: Task, precision: str, state: ReferenceState) -> None:
    """Every file of the format for one model, optimizer, scheduler and the two dataloaders of the
    user loop (train, eval), as a 1-process writer; the manifest last."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.json").unlink(missing_ok=True)  # incomplete until it is written again
    names = {id(p): n for n, p in state.model.named_parameters()}
    files: dict[str, bytes] = {
        "model_0.safetensors": save_tensors(_model_tensors(state.model)),
        "optimizer_0.safetensors": save_tensors(_optimizer_tensors(state.optimizer, names)),
        "optimizer_0.json": _json(_optimizer_json(state.optimizer, names)),
        "scheduler_0.json": _json({"class": _qualname(state.scheduler),
                                   "state": state.scheduler.state_dict()}),
        "precision.json": _json({"mixed_precision": MIXED_PRECISION[precision],
                                 "loss_scaler": _scaler(state.scaler)}),
        "rng_rank0.json": _json(_rng_json()),
        "rng_rank0.safetensors": save_tensors({"torch": torch.get_rng_state()}),
        "progress.json": _json({"dataloaders": [
            _progress(state.epoch, state.batches_consumed, task.global_batch_size, task.train_size,
                      drop_last=bool(training_loader_options(task).get("drop_last", False))),
            _progress(0, 0, task.eval_batch_size, task.eval_size),  # the eval loader: not iterated yet
        ]}),
    }
    for name, data in files.items():
        write_bytes_atomic(directory / name, data)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "writer": {"strategy": "reference", "world_size": 1, "mixed_precision": MIXED_PRECISION[precision],
                   "device": "cpu"},
        "versions": {"torch": torch.__version__, "deepspeed": None, "accelerate_core": None,
                     "safetensors": metadata.version("safetensors"), "python": platform.python_version()},
        "counts": {"models": 1, "optimizers": 1, "schedulers": 1, "dataloaders": 2, "ranks": 1},
        "files": {name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                  for name, data in files.items()},
    }
    write_text_atomic(directory / "manifest.json", json.dumps(manifest, indent=1))


def _model_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    # Floating point as float32 (the format's rule), integer/bool buffers as they are.
    return {k: (v.float() if v.is_floating_point() else v).detach().cpu().contiguous().clone()
            for k, v in model.state_dict().items()}


def _optimizer_tensors(optimizer: torch.optim.Optimizer, names: dict[int, str]) -> dict[str, torch.Tensor]:
    out = {}
    for param, entries in optimizer.state.items():
        for key, value in entries.items():
            if torch.is_tensor(value):
                tensor = value.float() if value.shape == param.shape and value.is_floating_point() else value
                out[f"{names[id(param)]}/{key}"] = tensor.detach().cpu().contiguous().clone()
    return out


def _optimizer_json(optimizer: torch.optim.Optimizer, names: dict[int, str]) -> dict[str, Any]:
    groups = [{**{k: v for k, v in group.items() if k != "params"},
               "params": [names[id(p)] for p in group["params"]]} for group in optimizer.param_groups]
    state = {names[id(p)]: {k: v for k, v in entries.items() if not torch.is_tensor(v)}
             for p, entries in optimizer.state.items()}
    return {"class": _qualname(optimizer), "model_index": 0, "param_groups": groups, "state": state}


def _scaler(scaler: torch.amp.GradScaler | None) -> dict[str, Any] | None:
    if scaler is None:
        return None
    state = scaler.state_dict()
    return {"scale": state["scale"], "growth_tracker": state["_growth_tracker"],
            "growth_factor": state["growth_factor"], "backoff_factor": state["backoff_factor"],
            "growth_interval": state["growth_interval"]}


def _rng_json() -> dict[str, Any]:
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {"python": [version, list(internal), gauss]}
    try:
        import numpy as np  # optional, as in the format
    except ImportError:
        return state
    kind, keys, position, has_gauss, cached = np.random.get_state()
    state["numpy"] = [kind, [int(k) for k in keys], int(position), int(has_gauss), float(cached)]
    return state


def _progress(epoch: int, batches: int, global_batch: int, samples: int,
              drop_last: bool = False) -> dict[str, Any]:
    # The user loop's loaders it writes for do not shuffle (no order, no generator state). A short
    # last batch is a batch of the epoch unless the loader drops it, as the core counts them: an
    # epoch whose every batch was taken is done, and its checkpoint resumes at the next epoch.
    in_epoch = samples // global_batch if drop_last else -(-samples // global_batch)
    return {"epoch": epoch, "batches_consumed": batches, "batches_in_epoch": in_epoch,
            "samples_consumed": min(batches * global_batch, samples), "global_batch_size": global_batch,
            "num_samples": samples, "shuffled": False, "order": None, "generator_state": None}


def _qualname(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _json(body: dict[str, Any]) -> bytes:
    return (json.dumps(body, indent=1) + "\n").encode("utf-8")
