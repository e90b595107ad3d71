"""The user loop's `accelerator.gather(output)`, made on every eval batch and checked against what
the record keeps.

The record's eval outputs come from `gather_for_metrics` (the padding of an uneven last batch
left out, so they compare with the golden). The user loop of docs/the-user-loop.md gathers with
`gather` instead, and gathers the whole model output, a structure: a Hugging Face model output is
a mapping of `loss` and `logits`. So the loop gathers that mapping too, and this checks what came
back: the same keys, every process's rows (processes x local rows), one loss per process, and
logits whose first rows are exactly the ones gather_for_metrics kept. A core whose gather drops
a key, returns one process's rows or reorders them fails the cell on evidence (`gather`), where
no compared number moved.

The loop also gathers `(logits, labels)` as one tuple with gather_for_metrics, the pattern of
Hugging Face's examples (`predictions, references = accelerator.gather_for_metrics((predictions,
batch["labels"]))`): it must come back a tuple of exactly what gather_for_metrics gave for each
tensor alone, the padding of an uneven last batch left out of both. And the same two as a
namedtuple (`EvalPair`), and the model's output object itself (a dataclass, as a Hugging Face
model output is) through `gather`: each must come back as its own type, holding what the plain
calls gave (a namedtuple rebuilt as a plain tuple, huggingface/accelerate#65, or a dataclass
rebuilt as a dict, the workaround of pytorch/pytorch#41327, break the user's `out.logits`).
Last, a generation loop's pattern: each process holds outputs of another length (here the first
`ragged_width(rank)` columns of its flattened logits), `pad_across_processes(..., dim=1,
pad_index=PAD_INDEX)` pads them to the longest, then `gather`: every process's block must be its
own columns followed by padding (a pad on the wrong dimension or side, as huggingface/accelerate#4150
fixed in its sibling, shows).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

import torch

PAD_INDEX = -100.0  # what Hugging Face's examples pad labels and generated tokens with


def ragged_width(rank: int) -> int:
    """How many columns of its flattened logits a process keeps for the padding check."""
    return 1 + rank


class EvalPair(NamedTuple):
    """(logits, labels) as the loop gathers them a third time: a namedtuple."""

    logits: torch.Tensor
    labels: torch.Tensor


class GatherCheck:
    def __init__(self, processes: int) -> None:
        self._processes = processes
        self._batches = 0
        self._agreed = 0
        self._first: str | None = None

    def add(self, gathered: Any, keys: set[str], local_rows: int, for_metrics: torch.Tensor,
            pair: Any, labels: torch.Tensor, structures: tuple[Any, Any, Any] | None = None,
            padded: torch.Tensor | None = None) -> None:
        """`gathered`: accelerator.gather of one eval batch's {"logits": ..., "loss": ...} (the
        loss where the model returned one), whose `keys` those are; `local_rows`: this process's
        rows in it; `for_metrics`: gather_for_metrics(logits); `pair`: gather_for_metrics((logits,
        labels)); `labels`: gather_for_metrics(labels); `structures`: (the model's output object,
        gather of it, gather_for_metrics(EvalPair(logits, labels))); `padded`: gather of
        pad_across_processes of each process's `ragged_width(rank)` columns."""
        self._batches += 1
        problem = self._problem(gathered, keys, local_rows, for_metrics) or _pair_problem(
            pair, for_metrics, labels) or (_structure_problem(*structures, gathered, for_metrics, labels)
                                           if structures is not None else None) or (
            self._padded_problem(padded, gathered["logits"], local_rows) if padded is not None else None)
        if problem is None:
            self._agreed += 1
        elif self._first is None:
            self._first = f"eval batch {self._batches}: {problem}"

    def _problem(self, gathered: Any, keys: set[str], local_rows: int,
                 for_metrics: torch.Tensor) -> str | None:
        if not isinstance(gathered, Mapping) or set(gathered) != keys:
            found = sorted(gathered) if isinstance(gathered, Mapping) else "no keys"
            return f"it returned a {type(gathered).__name__} ({found}) for a dict of {sorted(keys)}"
        logits, loss = gathered["logits"], gathered.get("loss")
        rows = self._processes * local_rows
        if logits.shape[0] != rows:
            return f"logits came back with {logits.shape[0]} rows, not {self._processes} x {local_rows}"
        if loss is not None and tuple(loss.shape) != (self._processes,):
            return f"the loss came back with shape {tuple(loss.shape)}, not one per process"
        kept = for_metrics.shape[0]
        if not _same(logits[:kept].detach().cpu(), for_metrics):
            return f"its logits' first {kept} rows are not the ones gather_for_metrics returned"
        return None

    def _padded_problem(self, padded: torch.Tensor, logits: torch.Tensor, local_rows: int) -> str | None:
        flat = logits.detach().cpu().reshape(logits.shape[0], -1)
        widths = [min(ragged_width(rank), flat.shape[1]) for rank in range(self._processes)]
        expected = flat.new_full((flat.shape[0], max(widths)), PAD_INDEX)
        for rank, width in enumerate(widths):
            rows = slice(rank * local_rows, (rank + 1) * local_rows)
            expected[rows, :width] = flat[rows, :width]
        call = "gather(pad_across_processes(outputs of another length per process, dim=1))"
        if tuple(padded.shape) != tuple(expected.shape):
            return f"{call} came back with shape {tuple(padded.shape)}, not {tuple(expected.shape)}"
        if not _same(padded.detach().cpu(), expected):
            return f"{call} holds other values than each process's columns followed by padding"
        return None

    def evidence(self) -> dict[str, Any]:
        return {"batches": self._batches, "agreed": self._agreed, "first_disagreement": self._first}


def _pair_problem(pair: Any, logits: torch.Tensor, labels: torch.Tensor) -> str | None:
    call = "gather_for_metrics((logits, labels))"
    if type(pair) is not tuple or len(pair) != 2:
        size = f" of {len(pair)}" if isinstance(pair, (list, tuple)) else ""
        return f"{call} returned a {type(pair).__name__}{size}, not a tuple of 2"
    for name, got, alone in (("logits", pair[0], logits), ("labels", pair[1], labels)):
        if not isinstance(got, torch.Tensor) or not _same(got.detach().cpu(), alone):
            tensor = isinstance(got, torch.Tensor) and got.ndim > 0
            rows = f"{got.shape[0]} rows" if tensor else type(got).__name__
            return f"{call} returned {name} ({rows}) other than gather_for_metrics({name}) alone " \
                   f"({alone.shape[0]} rows)"
    return None


def _structure_problem(output: Any, whole: Any, named: Any, gathered: Mapping[str, Any],
                       logits: torch.Tensor, labels: torch.Tensor) -> str | None:
    """The output object (None: not gathered, harness.implementations.base.Adapter.gathers_dataclasses)
    and the namedtuple, each back as its own type with the plain calls' values."""
    if whole is not None and type(whole) is not type(output):
        return f"gather(output) returned a {type(whole).__name__} for a {type(output).__name__}"
    for field in dataclasses.fields(output) if whole is not None else ():
        got, plain = getattr(whole, field.name), gathered.get(field.name)
        same = got is plain is None or (isinstance(got, torch.Tensor) and isinstance(plain, torch.Tensor)
                                        and _same(got.detach().cpu(), plain.detach().cpu()))
        if not same:
            return f"gather(output).{field.name} is not what gather gave for it in a dict"
    call = "gather_for_metrics(EvalPair(logits, labels))"
    if type(named) is not EvalPair:
        return f"{call} returned a {type(named).__name__}, not an EvalPair"
    for name, alone in (("logits", logits), ("labels", labels)):
        got = getattr(named, name)
        if not isinstance(got, torch.Tensor) or not _same(got.detach().cpu(), alone):
            return f"{call}.{name} is not gather_for_metrics({name}) alone"
    return None


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal element for element, NaN where NaN (a run that diverged to NaN is the numbers'
    failure to report, not the gather's)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(((a == b) | (a.isnan() & b.isnan())).all()) if a.is_floating_point() else torch.equal(a, b)
