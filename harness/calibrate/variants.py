"""The benign perturbations of the reference: each one a legitimate reason for a cell's bits to
differ from the golden's, with the tolerance families whose cells it describes."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from harness.calibrate.child_reference import AVX2_KERNELS
from harness.golden.half_weights import DEEPSPEED_STYLES
from harness.golden.reference import Perturbation
from harness.plan.cell import PRECISIONS

HALF = ("fp16", "bf16")


@dataclass(frozen=True)
class Variant:
    perturbation: Perturbation
    families: tuple[str, ...]  # tolerance families (harness.plan.tolerances.FAMILIES values)
    precisions: tuple[str, ...]
    why: str
    # Set: the reference runs in a child process with these variables added to its environment
    # (harness.calibrate.child_reference): what cannot change inside a running torch
    environment: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return self.perturbation.name


VARIANTS: tuple[Variant, ...] = (
    Variant(Perturbation(name="this_machine"), ("plain", "zero"), PRECISIONS,
            "the reference as a cell's process runs it: this CPU's kernels, oneDNN on, against goldens "
            "made in the deterministic mode (possibly on another CPU)"),
    Variant(Perturbation(name="avx2_kernels"), ("plain", "zero"), PRECISIONS,
            "the reference in a child process with torch, oneDNN and MKL capped at AVX2: on a CPU with "
            "AVX-512 (or AMX, native fp16) other kernels, so other sums and roundings; on an AVX2-only CPU "
            "the same bits as this_machine", environment=AVX2_KERNELS),
    Variant(Perturbation(splits=2, name="two_ranks"), ("plain", "zero"), PRECISIONS,
            "each global batch as two ranks' halves, their gradients averaged: other sums, and in "
            "half precision each half's matmuls rounded apart"),
    Variant(Perturbation(splits=2, threads=2, name="two_ranks_two_threads"), ("plain", "zero"), PRECISIONS,
            "as two_ranks, with two intra-op threads (threaded reductions sum in another order)"),
    Variant(Perturbation(splits=2, half_weights="zero1", name="two_ranks_zero1_half"), ("zero",), HALF,
            "DeepSpeed ZeRO-1's half precision: the model itself in fp16/bf16 under autocast, fp32 masters "
            "copied from the half weights, each rank's gradients accumulated in half, reduced in fp32 at "
            "the boundary and rounded back to half (harness.golden.half_weights)"),
    Variant(Perturbation(splits=2, half_weights="zero2", name="two_ranks_zero2_half"), ("zero",), HALF,
            "DeepSpeed ZeRO-2/3's half precision: as two_ranks_zero1_half, but every micro-batch's gradients "
            "reduced across ranks in fp32, rounded to half, and accumulated in half "
            "(harness.golden.half_weights)"),
    Variant(Perturbation(splits=2, half_weights="fsdp", name="two_ranks_fsdp_half"), ("plain",), HALF,
            "FSDP2's MixedPrecisionPolicy: whole layers (the loss included) in fp16/bf16 without "
            "autocast, each micro-batch's gradients reduced in fp32 into fp32 masters; fsdp is in the "
            "plain family"),
    Variant(Perturbation(splits=2, sync_batchnorm=True, name="two_ranks_sync_batchnorm"), ("plain", "zero"),
            PRECISIONS,
            "synchronised BatchNorm on two ranks (sync_batchnorm=True): each rank's rows through their own "
            "matmuls, BatchNorm over the whole global batch (harness.golden.rank_rows); for tasks with "
            "BatchNorm, whose cells on 2 processes synchronise it"),
)

# The variants that reproduce DeepSpeed's half precision (the zero family's per-task entries need
# one of them: only they start from weights rounded to half, as ZeRO does).
DEEPSPEED_HALF_VARIANTS = frozenset(v.name for v in VARIANTS
                                    if v.perturbation.half_weights in DEEPSPEED_STYLES)


def splits_change_the_math(model: nn.Module, ignore_batchnorm: bool = False) -> str | None:
    """Why a task's result depends on how a batch is split (then a split is not benign noise but
    a difference the matrix declares: per-rank BatchNorm statistics, per-rank dropout draws).
    `ignore_batchnorm`: as if BatchNorm were synchronised (sync_batchnorm=True)."""
    for module in model.modules():
        if isinstance(module, _BatchNorm) and not ignore_batchnorm:
            return f"{type(module).__name__} normalizes over each rank's share of the batch"
        if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0:
            return f"{type(module).__name__} draws other random numbers on each rank"
    return None


def variants_for(precision: str, model: nn.Module) -> list[Variant]:
    """The variants that describe benign noise for this task at this precision: a split variant
    only where splitting the batch changes no math, and the synchronised-BatchNorm one only where
    BatchNorm is the one thing a split would change (then the cells that pass synchronise it)."""
    split_dependent = splits_change_the_math(model) is not None
    sync_applies = has_batchnorm(model) and splits_change_the_math(model, ignore_batchnorm=True) is None
    return [v for v in VARIANTS if precision in v.precisions
            and (v.perturbation.splits == 1
                 or (sync_applies if v.perturbation.sync_batchnorm else not split_dependent))]


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(module, _BatchNorm) for module in model.modules())


def cell_semantics(family: str, precision: str, model: nn.Module) -> list[Perturbation]:
    """How the family's backends compute a cell of this precision, as reference runs: the golden's
    loop (single, DDP: autocast over fp32 weights) and, in half precision, the variants that
    reproduce FSDP2 (plain) or ZeRO-1 and ZeRO-2/3 (zero). Those split the batch by rank, so a task
    whose math depends on the split keeps the golden's loop alone (its multi-process cells are
    declared, or synchronise BatchNorm, which none of them models)."""
    golden_loop = Perturbation()
    if precision not in HALF or splits_change_the_math(model) is not None:
        return [golden_loop]
    backends = [v.perturbation for v in VARIANTS if v.perturbation.half_weights and family in v.families]
    return [golden_loop, *backends] if family == "plain" else backends
