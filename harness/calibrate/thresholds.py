"""Detection thresholds: the smallest uniform gradient error a cell's comparison catches.

The bug is simulated on the reference side (every gradient times 1 + e before each optimizer
step, `Perturbation.gradient_scale`), and the perturbed run is judged against the golden with a
tolerance exactly as a cell is (harness.judge.compare.compare_record). A gradient reduction that
sums where it should average, an accumulation that divides twice, a loss scale left in: all move
every gradient by a factor. A tolerance that lets a 10% factor through cannot see them.

Found by bisection on a log scale: decades from 1e-7 up to 1 (a doubled gradient) until the
comparison fails, then halving that decade. An optimizer that is invariant to a uniform gradient
scale (Adam and AdamW, up to their eps) cannot see this bug at all, whatever the tolerance: the
table says so rather than calling the tolerance loose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.golden.reference import Perturbation, ReferenceInputs, train_reference
from harness.judge.compare import compare_record
from harness.plan.tolerances import Tolerance
from harness.record.record_format import Record
from harness.tasks.base import Task

# The goals: a cell must catch a gradient error of this size at its precision.
GOALS = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 2e-2}
DECADES = tuple(10.0 ** exponent for exponent in range(-7, 1))  # 1e-7 ... 1
BISECTIONS = 6  # a decade halved (in log) six times: within 4% of the threshold


@dataclass(frozen=True)
class Threshold:
    task: str
    precision: str
    family: str
    error: float | None  # the smallest e found to fail; None: not caught even at e = 1
    caught_by: str  # the first failing quantity at `error`, or why nothing failed
    scale_invariant: bool  # the task's optimizer cannot see a uniform gradient scale

    @property
    def goal(self) -> float:
        return GOALS[self.precision]

    @property
    def meets_goal(self) -> bool:
        return self.error is not None and self.error <= self.goal


def first_failure(task: Task, precision: str, inputs: ReferenceInputs, golden: Record,
                  tolerance: Tolerance, error: float) -> str | None:
    """The first quantity that fails when every gradient is scaled by 1 + error, else None."""
    bug = Perturbation(gradient_scale=1.0 + error, name=f"gradients x (1 + {error:g})")
    record = train_reference(task, precision, inputs=inputs, perturbation=bug)
    for comparison in compare_record(record, golden, tolerance):
        if not comparison.ok:
            return comparison.quantity
    return None


def detection_threshold(task: Task, precision: str, family: str, inputs: ReferenceInputs, golden: Record,
                        tolerance: Tolerance) -> Threshold:
    invariant = is_scale_invariant(task)
    unperturbed = first_failure(task, precision, inputs, golden, tolerance, 0.0)
    if unperturbed is not None:  # the reference itself leaves the tolerance: nothing to bisect
        return Threshold(task.name, precision, family, 0.0, f"{unperturbed} (unperturbed)", invariant)
    passing, failing, caught_by = 0.0, None, ""
    for error in DECADES:
        found = first_failure(task, precision, inputs, golden, tolerance, error)
        if found is not None:
            failing, caught_by = error, found
            break
        passing = error
    if failing is None:
        why = "no quantity moved out of tolerance at e = 1"
        return Threshold(task.name, precision, family, None, why, invariant)
    low = max(passing, failing / 10)
    for _ in range(BISECTIONS):
        middle = math.sqrt(low * failing)
        found = first_failure(task, precision, inputs, golden, tolerance, middle)
        if found is None:
            low = middle
        else:
            failing, caught_by = middle, found
    return Threshold(task.name, precision, family, failing, caught_by, invariant)


def is_scale_invariant(task: Task) -> bool:
    """Adam-family optimizers divide by the gradient's running RMS: a uniform scale cancels."""
    import torch

    optimizer = task.build_optimizer(task.build_model())
    return isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW, torch.optim.Adamax, torch.optim.NAdam,
                                  torch.optim.RAdam))
