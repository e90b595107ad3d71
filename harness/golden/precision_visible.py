"""The guard on half-precision goldens: one bit-identical to the same task's fp32 golden is refused.

torch.autocast casts only some ops to the half dtype (linear, matmul, conv, ...). A model built
only from elementwise ops computes the same bits under fp16/bf16 autocast as in fp32, so its
half-precision golden is the fp32 golden again, and a cell that silently ran fp32 matches it at
0% of its tolerance: `regression` and `scalar` were such tasks until their prediction went through
`nn.functional.linear`. `golden --check` and `golden --update` regenerate the fp32 golden beside
every half-precision one and refuse the latter when this precision changed nothing.

What is compared: every tensor the two goldens share (losses, learning rates, eval outputs, the
final weights), by value, a different dtype counting as a change. An fp16 golden whose loss scaler
skipped a step (a task's injected overflow) trains on from other weights than fp32 from that step
on, which is the scaler's doing, not the precision's: there, only the losses up to and including
the first skipped step are compared (each computed from the same weights as fp32's, had the
precision changed nothing).
"""

from __future__ import annotations

import torch

from harness.errors import explain
from harness.record.record_format import Record
from harness.tasks.base import Task

_LOSSES = "losses"


def unchanged_by_precision(task: Task, half: Record, fp32: Record) -> list[str] | None:
    """The names of the tensors compared when every one of them is bit-identical between `half`
    and `fp32` (the precision changed nothing); None when the precision changed something."""
    if half.skipped_steps:
        micro_steps = micro_steps_through(task, min(half.skipped_steps))
        compared = {_LOSSES: (torch.tensor(half.losses[:micro_steps], dtype=torch.float64),
                              torch.tensor(fp32.losses[:micro_steps], dtype=torch.float64))}
    else:
        mine, theirs = half.tensors(), fp32.tensors()
        compared = {name: (mine[name], theirs[name]) for name in sorted(set(mine) & set(theirs))}
    if not compared or not all(_same(a, b) for a, b in compared.values()):
        return None
    return list(compared)


def micro_steps_through(task: Task, optimizer_step: int) -> int:
    """How many micro-steps (training forwards) the loop has run when optimizer step
    `optimizer_step` (0-based) is taken: a short last accumulation ends each epoch."""
    epoch, within = divmod(optimizer_step, task.optimizer_steps_per_epoch)
    done_in_epoch = min((within + 1) * task.gradient_accumulation_steps, task.micro_steps_per_epoch)
    return epoch * task.micro_steps_per_epoch + done_in_epoch


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False  # a half-precision output dtype is a change by itself
    return bool(torch.equal(a, b)) or bool(torch.allclose(a.double(), b.double(), rtol=0.0, atol=0.0,
                                                          equal_nan=True))


def refusal(task: Task, precision: str, compared: list[str]) -> str:
    """The given/why/valid/fix message of a half-precision golden the guard refuses."""
    return explain(
        f"golden {task.name}-{precision}",
        f"its tensors ({', '.join(compared)}) are bit-identical to the {task.name}-fp32 golden's: "
        f"this precision changed nothing, so its cells could not tell {precision} from fp32 (no op "
        "of the model is one autocast casts to the half dtype)",
        "a half-precision golden that differs from the fp32 one: a model computed through an op "
        "autocast casts (nn.Linear, nn.functional.linear, a matmul, a convolution)",
        "compute the model's forward through such an op (harness/tasks/regression.py does, with "
        "nn.functional.linear), or remove this task's fp16/bf16 cells with an [[exclude]] entry in "
        "matrix.toml; the golden was not written")
