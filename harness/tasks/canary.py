"""Canary tasks: the `regression` task with a fault injected on purpose, to prove the runner
survives what it tests breaking. Never in the default matrix; `python -m harness run -k canary`.

- canary_crash: rank 1 dies (os._exit, no exception, no goodbye) at training step 3.
- canary_hang:  at step 3 rank 1 stops answering, so rank 0 waits forever in the gradient
                all-reduce (a collective); only the runner's --timeout ends it.
- canary_nan:   at step 4 the model's output turns NaN, so the loss is NaN from that step on and
                the comparison with regression's golden names the step.

Each borrows the golden of its base task (`golden_of`): the fault is the only difference.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks.base import TaskOutput
from harness.tasks.registry import register_task
from harness.tasks.regression import RegressionModel, RegressionTask


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class FaultyRegressionModel(RegressionModel):
    """RegressionModel that misbehaves at one training forward (0-based micro-step `step`)."""

    def __init__(self, fault: str, step: int) -> None:
        super().__init__()
        self.fault = fault
        self.fault_step = step
        self.calls = 0

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        if self.training:
            if self.calls == self.fault_step:
                x = self._inject(x)
            self.calls += 1
        return super().forward(x, labels)

    def _inject(self, x: torch.Tensor) -> torch.Tensor:
        rank = _rank()
        if self.fault == "crash" and rank == 1:
            print(
                f"canary_crash: rank 1 dies now, at training step {self.fault_step}",
                file=sys.stderr,
                flush=True,
            )
            os._exit(13)
        if self.fault == "hang" and rank == 1:
            print(
                f"canary_hang: rank 1 stops at step {self.fault_step}; rank 0 waits in all-reduce",
                file=sys.stderr,
                flush=True,
            )
            while True:  # never joins the collective its peer is waiting in
                time.sleep(1.0)
        if self.fault == "nan":
            return x * float("nan")
        return x


@dataclass(frozen=True, kw_only=True)
class CanaryTask(RegressionTask):
    fault: str = "crash"  # "crash" | "hang" | "nan"
    fault_step: int = 3
    golden_of: str = "regression"

    def _make_model(self) -> nn.Module:
        return FaultyRegressionModel(self.fault, self.fault_step)


register_task(CanaryTask(name="canary_crash", fault="crash", fault_step=3))
register_task(CanaryTask(name="canary_hang", fault="hang", fault_step=3))
register_task(CanaryTask(name="canary_nan", fault="nan", fault_step=4))
