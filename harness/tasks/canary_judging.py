"""Canaries of how cells are judged (tests/harness/run): a cell that raises in training, and a
pair whose second cell fails only when the first ran before it in the same process.

- `canary_raise`: raises a RuntimeError in its third forward pass: `failed`, with the traceback
  (an exception inside a cell is the cell's failure, as in pytest), and it ends its launch.
- `canary_leak_set` then `canary_leak`: the first trains like `regression` but leaves a
  process-wide setting behind (as DeepSpeed's `memory_efficient_linear` once did); the second
  adds an offset to its predictions when it finds that setting. In one launch, the second
  fails; rerun alone in a fresh launch, it passes, and the report must say the failure was
  left behind by another cell.

Each borrows the golden of `regression`: the fault is the only difference.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.tasks.base import TaskOutput
from harness.tasks.registry import register_task
from harness.tasks.regression import RegressionModel, RegressionTask

_LEFT_BEHIND: dict[str, bool] = {"setting": False}  # process-wide, like a patched global


class _RaisingModel(RegressionModel):
    def __init__(self, at_call: int) -> None:
        super().__init__()
        self.at_call = at_call
        self.calls = 0

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        self.calls += 1
        if self.training and self.calls == self.at_call:
            raise RuntimeError(f"canary_raise: raised on purpose in forward pass {self.at_call}")
        return super().forward(x, labels)


class _LeakSensitiveModel(RegressionModel):
    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        if _LEFT_BEHIND["setting"]:
            x = x + 0.5  # what the setting left by the cell before does to this one
        return super().forward(x, labels)


@dataclass(frozen=True, kw_only=True)
class JudgingCanaryTask(RegressionTask):
    fault: str = "raise"  # "raise" | "leak_set" | "leak"
    golden_of: str = "regression"

    def _make_model(self) -> nn.Module:
        if self.fault == "raise":
            return _RaisingModel(at_call=3)
        if self.fault == "leak_set":
            _LEFT_BEHIND["setting"] = True
            return RegressionModel()
        return _LeakSensitiveModel()


register_task(JudgingCanaryTask(name="canary_raise", fault="raise"))
register_task(JudgingCanaryTask(name="canary_leak_set", fault="leak_set"))
register_task(JudgingCanaryTask(name="canary_leak", fault="leak"))
