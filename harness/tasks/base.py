"""What a reference task is: a frozen definition from which model, optimizer, scheduler and data
are rebuilt identically in any process.

A task fixes each step's *global* batch; a run on N processes gives rank r the r-th block of
`global_batch_size // N` samples of every global batch (the core's dataloader sharding), so one
baseline, made in a single process over whole global batches, serves every world size.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

# Offsets of the seeds derived from `Task.seed`, so that data and weights never share a stream.
_TRAIN_SEED_OFFSET = 1
_EVAL_SEED_OFFSET = 2


@dataclass
class TaskOutput:
    """What every task model returns, shaped like a Hugging Face model output."""

    loss: torch.Tensor | None
    logits: torch.Tensor


class DictDataset(Dataset[dict[str, torch.Tensor]]):
    """A map-style dataset of dict samples over tensors that share their first dimension.

    The default collate function stacks samples back into dict batches, which is what
    `model(**batch)` in the user loop takes.
    """

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        lengths = {name: len(t) for name, t in tensors.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"DictDataset: tensors of different lengths {lengths}")
        self.tensors = tensors
        self._length = next(iter(lengths.values()))

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {name: t[index] for name, t in self.tensors.items()}


@dataclass(frozen=True, kw_only=True)
class Task:
    """Base of the reference tasks. Subclasses add their sizes and implement the `_make_*` and
    `_make_data` hooks; everything that must be identical across processes derives from `seed`."""

    name: str
    seed: int = 1234
    train_size: int = 64
    eval_size: int = 37
    global_batch_size: int = 8  # samples per micro-step summed over all processes
    eval_batch_size: int = 8  # global eval batch; per process: // processes
    gradient_accumulation_steps: int = 1
    epochs: int = 1
    # fp16 only: the optimizer step (0-based) whose gradients are made non-finite, to prove that
    # loss scaling skips that step and lowers the scale. Ignored for fp32/bf16.
    inject_overflow_step: int | None = None
    # Clip the global L2 gradient norm to this before every optimizer step, through
    # `accelerator.clip_grad_norm_` in the user loop and torch.nn.utils.clip_grad_norm_ in the
    # golden. None: no clipping.
    max_grad_norm: float | None = None

    def __post_init__(self) -> None:
        if self.train_size % self.global_batch_size:
            raise ValueError(
                f"task {self.name!r}: train_size {self.train_size} is not a multiple of "
                f"global_batch_size {self.global_batch_size}; every global batch must be full"
            )

    # ----------------------------------------------------------------------------- sizes
    @property
    def micro_steps_per_epoch(self) -> int:
        return self.train_size // self.global_batch_size

    @property
    def optimizer_steps_per_epoch(self) -> int:
        # The user loop also steps on the last micro-batch of an epoch (a partial accumulation).
        return -(-self.micro_steps_per_epoch // self.gradient_accumulation_steps)

    @property
    def steps(self) -> int:
        """Optimizer steps over the whole run."""
        return self.optimizer_steps_per_epoch * self.epochs

    def per_process_batch_size(self, processes: int) -> int:
        if processes < 1 or self.global_batch_size % processes or self.eval_batch_size % processes:
            raise ValueError(
                f"task {self.name!r}: global batch {self.global_batch_size} (eval "
                f"{self.eval_batch_size}) does not split over {processes} processes; valid: a "
                f"divisor of both. Fix: run it on fewer processes or change the task's batch sizes"
            )
        return self.global_batch_size // processes

    def is_accumulation_boundary(self, step: int) -> bool:
        """The user loop's condition for an optimizer step after micro-step `step` (0-based
        within the epoch)."""
        return (step + 1) % self.gradient_accumulation_steps == 0 or step == self.micro_steps_per_epoch - 1

    def injects_overflow(self, precision: str, optimizer_step: int) -> bool:
        return precision == "fp16" and self.inject_overflow_step == optimizer_step

    # ----------------------------------------------------------------------------- builders
    def build_model(self) -> nn.Module:
        # Weights come from the task seed only; the caller's global RNG is left as it was.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return self._make_model()

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return self._make_optimizer(model)

    def build_scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        return self._make_scheduler(optimizer)

    def train_dataset(self) -> DictDataset:
        return DictDataset(self._make_data(self.train_size, _generator(self.seed + _TRAIN_SEED_OFFSET)))

    def eval_dataset(self) -> DictDataset:
        return DictDataset(self._make_data(self.eval_size, _generator(self.seed + _EVAL_SEED_OFFSET)))

    # ----------------------------------------------------------------------------- identity
    def definition_hash(self) -> str:
        """sha256 over the task's fields and the code of the module that defines it (and of this
        base module): change either, and goldens made before say they are stale. The code is
        hashed as its syntax tree without docstrings, so comments and docs may change freely."""
        digest = hashlib.sha256()
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        digest.update(type(self).__qualname__.encode())
        digest.update(json.dumps(fields, sort_keys=True, default=repr).encode())
        for module_name in (__name__, type(self).__module__):
            digest.update(_code_shape(inspect.getsource(sys.modules[module_name])).encode())
        return digest.hexdigest()

    def init_sha256(self) -> str:
        """sha256 of the initial weights (`build_model()`'s state dict, in order)."""
        digest = hashlib.sha256()
        for key, tensor in self.build_model().state_dict().items():
            digest.update(f"{key}/{tensor.dtype}/{tuple(tensor.shape)}".encode())
            digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
        return digest.hexdigest()

    def data_sha256(self) -> str:
        """sha256 of every training and evaluation tensor, in a fixed order."""
        digest = hashlib.sha256()
        for split, dataset in (("train", self.train_dataset()), ("eval", self.eval_dataset())):
            for key, tensor in sorted(dataset.tensors.items()):
                digest.update(f"{split}/{key}/{tensor.dtype}/{tuple(tensor.shape)}".encode())
                digest.update(tensor.contiguous().numpy().tobytes())
        return digest.hexdigest()

    # ----------------------------------------------------------------------------- hooks
    def _make_model(self) -> nn.Module:
        raise NotImplementedError

    def _make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        raise NotImplementedError

    def _make_scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        # Default: a constant learning rate (still a scheduler, so every loop is the same shape).
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _step: 1.0)

    def _make_data(self, size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        raise NotImplementedError


def _code_shape(source: str) -> str:
    """The module's syntax tree without docstrings (comments are not in the tree at all)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def trainable(model: nn.Module, prefixes: tuple[str, ...]) -> Iterator[nn.Parameter]:
    """Trainable parameters whose names start with one of `prefixes` (for param groups)."""
    for name, param in model.named_parameters():
        if param.requires_grad and name.startswith(prefixes):
            yield param


def describe(task: Task) -> dict[str, Any]:
    """The task's fields, for a record's metadata."""
    return {f.name: getattr(task, f.name) for f in dataclasses.fields(task)}
