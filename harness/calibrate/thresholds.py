"""Detection thresholds: the smallest uniform gradient error a cell's comparison catches.

The bug is simulated on the reference side (every gradient times 1 + e before each optimizer
step, `Perturbation.gradient_scale`), and the perturbed run is judged against the golden with a
tolerance exactly as a cell is (harness.judge.compare.compare_record). A gradient reduction that
sums where it should average, an accumulation that divides twice, a loss scale left in: all move
every gradient by a factor. A tolerance that lets a 10% factor through cannot see them.

The reference stands in for each backend of the family as its cells compute (`semantics`:
harness.calibrate.variants.cell_semantics): the golden's loop for single and DDP, FSDP2's and
ZeRO-1's and ZeRO-2/3's half precision for theirs (those variants reproduce the real cells bit for
bit here, docs/calibration.md), and a family's threshold is its weakest backend's: a bug caught in
one of its cells but not another is not caught in that family.

Found by bisection on a log scale: decades from 1e-7 up to 1 (a doubled gradient) until the
comparison fails, then halving that decade. An optimizer that is invariant to a uniform gradient
scale (Adam and AdamW, up to their eps) cannot see this bug at all, whatever the tolerance: the
table says so rather than calling the tolerance loose.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from harness.golden.half_weights import DEEPSPEED_STYLES
from harness.golden.reference import NO_PERTURBATION, Perturbation, ReferenceInputs, train_reference
from harness.judge.compare import compare_record
from harness.judge.output_dtype import HALF_DTYPES
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
    semantics: str = "golden"  # the backend semantics (a Perturbation's name) that set it: the weakest

    @property
    def goal(self) -> float:
        return GOALS[self.precision]

    @property
    def meets_goal(self) -> bool:
        return self.error is not None and self.error <= self.goal


def first_failure(task: Task, precision: str, inputs: ReferenceInputs, golden: Record,
                  tolerance: Tolerance, error: float,
                  semantics: Perturbation = NO_PERTURBATION) -> str | None:
    """The first quantity that fails when every gradient is scaled by 1 + error (in a run with the
    backend `semantics`), else None."""
    bug = replace(semantics, gradient_scale=1.0 + error,
                  name=f"{semantics.name}, gradients x (1 + {error:g})")
    record = train_reference(task, precision, inputs=inputs, perturbation=bug)
    for comparison in compare_record(record, golden, tolerance, _output_dtype(semantics, precision)):
        if not comparison.ok:
            return comparison.quantity
    return None


def detection_threshold(task: Task, precision: str, family: str, inputs: ReferenceInputs, golden: Record,
                        tolerance: Tolerance,
                        semantics: Sequence[Perturbation] = (NO_PERTURBATION,)) -> Threshold:
    """The family's threshold: the largest of its backends' (`semantics`); unseen in one is unseen.
    A backend whose benign run already fails (error 0) is that result, never hidden by another's."""
    found = [_threshold(task, precision, family, inputs, golden, tolerance, base) for base in semantics]
    unperturbed = [t for t in found if t.error == 0.0]
    if unperturbed:
        return unperturbed[0]
    return max(found, key=lambda t: math.inf if t.error is None else t.error)


def _threshold(task: Task, precision: str, family: str, inputs: ReferenceInputs, golden: Record,
               tolerance: Tolerance, semantics: Perturbation) -> Threshold:
    invariant = is_scale_invariant(task)

    def fails(error: float) -> str | None:
        return first_failure(task, precision, inputs, golden, tolerance, error, semantics)

    unperturbed = fails(0.0)
    if unperturbed is not None:  # the reference itself leaves the tolerance: nothing to bisect
        return Threshold(task.name, precision, family, 0.0, f"{unperturbed} (unperturbed)", invariant,
                         semantics.name)
    failing, caught_by = smallest_failing_error(fails)
    return Threshold(task.name, precision, family, failing, caught_by, invariant, semantics.name)


def smallest_failing_error(fails: Callable[[float], str | None]) -> tuple[float | None, str]:
    """The smallest e at which `fails(e)` names a failure (and that failure), by decades from
    1e-7 then six halvings of the decade in log; (None, why) if nothing fails at e = 1.
    `fails(0.0)` is the caller's to check first: a failure there is no threshold."""
    passing, failing, caught_by = 0.0, None, ""
    for error in DECADES:
        found = fails(error)
        if found is not None:
            failing, caught_by = error, found
            break
        passing = error
    if failing is None:
        return None, "no quantity moved out of tolerance at e = 1"
    low = max(passing, failing / 10)
    for _ in range(BISECTIONS):
        middle = math.sqrt(low * failing)
        found = fails(middle)
        if found is None:
            low = middle
        else:
            failing, caught_by = middle, found
    return failing, caught_by


def _output_dtype(semantics: Perturbation, precision: str) -> torch.dtype | None:
    """The eval outputs' dtype a cell of these semantics must give (harness.judge.output_dtype):
    half for DeepSpeed's half model, fp32 for FSDP2's root output, else the golden's."""
    if precision not in HALF_DTYPES or not semantics.half_weights:
        return None
    return HALF_DTYPES[precision] if semantics.half_weights in DEEPSPEED_STYLES else torch.float32


def is_scale_invariant(task: Task) -> bool:
    """Adam-family optimizers divide by the gradient's running RMS: a uniform scale cancels."""
    optimizer = task.build_optimizer(task.build_model())
    return isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW, torch.optim.Adamax, torch.optim.NAdam,
                                  torch.optim.RAdam))
