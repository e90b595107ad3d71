"""Synchronised BatchNorm on N ranks, imitated in one process (a calibration variant only).

With `Accelerator(sync_batchnorm=True)` on N processes each rank runs its share of the global
batch through every layer, but each BatchNorm normalises with the statistics of the whole global
batch (torch.nn.SyncBatchNorm gathers them). Splitting the batch into micro-batches, as the other
split variants do, would give each part its own statistics: another computation, not noise. So
the whole batch goes through the model at once, and each `nn.Linear` computes each rank's rows
with a matmul of their own, as that rank's process would: the matmuls round as they do on N ranks,
BatchNorm sees every row, and each rank's weight gradient is a matmul of its own rows, summed in
fp32 (autocast's cast cache off, so each rank's half-precision copy of a weight gets a gradient of
its own before the sum, as DDP all-reduces fp32 gradients rather than summing half ones).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import MethodType

import torch
from torch import nn


@contextlib.contextmanager
def linear_rows_per_rank(model: nn.Module, ranks: int) -> Iterator[None]:
    """While active, every nn.Linear of `model` computes a batch whose first dimension divides
    into `ranks` equal shares as one matmul per share (the shares' outputs concatenated)."""
    patched = [m for m in model.modules() if isinstance(m, nn.Linear)]
    for module in patched:
        module.forward = MethodType(_per_rank_forward(ranks), module)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for module in patched:
            del module.forward  # back to the class's forward


def _per_rank_forward(ranks: int) -> Callable[[nn.Linear, torch.Tensor], torch.Tensor]:
    def forward(self: nn.Linear, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.dim() < 2 or inputs.shape[0] % ranks:
            return nn.Linear.forward(self, inputs)
        return torch.cat([nn.Linear.forward(self, share) for share in inputs.chunk(ranks)])

    return forward
