"""Judging the evidence of what ran against the cell, before any number: a cell that asked for
ZeRO-3 bf16 and silently ran DDP fp32 must fail for that, even when its numbers land inside the
bf16 tolerance of the golden (they do: fp32 results are within bf16 tolerance of bf16 goldens).

The evidence comes from the rank's recorder (harness.rank.recorder: the core's what_ran(),
accelerate_core/evidence, and the collectives, activation dtypes and random draws): the strategy
object, world size and device, the DeepSpeed engine's ZeRO stage, partitioned parameters and the
settings in force, FSDP2's units, sharded parameters, mesh and resolved dtypes
(harness.judge.fsdp_evidence_check), the dtype the task's autocast site computed in (the first module
autocast acts on: harness.judge.autocast_site), in training and in evaluation, and the dtype
of the first gradient that flowed back into such a module's output, how gradients were reduced
across ranks, the loss scales the run recorded, what accelerator.unwrap_model handed back and
what accelerator.gather returned for a whole model output (harness.rank.gather_check). Each
check below returns one sentence, or None when that piece agrees; the first sentence fails the
cell.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.judge.autocast_site import AutocastSite, autocast_site
from harness.judge.dtype_names import COMPUTE_DTYPES
from harness.judge.fsdp_evidence_check import fsdp_mismatch, missing_fields
from harness.plan.cell import Cell
from harness.record.record_format import Record

ACTIVATION_DTYPES = COMPUTE_DTYPES  # the dtype the task's autocast site must compute in
# The torch.distributed calls that reduce gradients (DeepSpeed's road; DDP's reducer is C++ and
# is judged by gradient agreement instead).
# FSDP2 reduce-scatters through reduce_scatter_single.
GRADIENT_REDUCTIONS = ("all_reduce", "all_reduce_coalesced", "reduce_scatter", "reduce_scatter_tensor",
                       "reduce", "reduce_scatter_single")

Check = Callable[[Cell, Record, dict[str, Any], str], "str | None"]


def evidence_mismatch(cell: Cell, record: Record) -> str | None:
    """One sentence saying how what ran differs from what the cell asked for; None when it agrees."""
    evidence: dict[str, Any] | None = record.meta.get("evidence")
    if not isinstance(evidence, dict):
        return "the record carries no evidence of what ran (made by another harness version?)"
    asked = f"asked for {cell.strategy} {cell.precision} on {cell.device}{cell.processes}"
    for check in CHECKS:
        found = check(cell, record, evidence, asked)
        if found is not None:
            return found
    return None


def _missing(cell: Cell, record: Record, evidence: dict[str, Any], asked: str) -> str | None:
    """Every field the cell's kind implies must be there, and those the checks below read as
    tables must be tables: a record without one says nothing about that piece of what ran, and
    nothing said is never taken for agreement. (So the checks below need no fallback of their
    own for a field that is absent.)"""
    missing = [key for key in required_fields(cell, cell.task) if not _present(evidence, key)]
    engine = evidence.get("deepspeed")
    if cell.is_deepspeed and engine is not None:  # absent: _backend's "the run had no DeepSpeed engine"
        if not isinstance(engine, dict):
            missing.append("deepspeed")
        else:
            missing += [f"deepspeed.{key}" for key in DEEPSPEED_FIELDS if not _present(engine, key)]
    if cell.is_fsdp:  # an absent block: fsdp_mismatch's "the run had no FSDP2 units"
        missing += missing_fields(evidence)
    if not missing:
        return None
    return (f"{asked}: the record has no evidence of {', '.join(missing)} "
            "(evidence that is missing is a failure)")


def _present(evidence: dict[str, Any], key: str) -> bool:
    """The field is there, and a table where the checks read it as one (a string or a number in
    its place says no more than nothing)."""
    return key in evidence and (key not in TABLE_FIELDS or isinstance(evidence[key], dict))


# Always: what ran, where, on how many processes; whether a training step drew random numbers.
ALWAYS_REQUIRED = ("strategy", "strategy_class", "world_size", "device", "emulated", "random_draws",
                   "unwrap_model", "gather")
DEEPSPEED_FIELDS = ("zero_stage", "partitioned_parameters", "parameters", "in_force", "trainable_elements")
# The fields the checks read as tables (the engine's own, `deepspeed`, is checked apart).
TABLE_FIELDS = frozenset({"collectives", "collective_elements", "gradients_agreed", "in_force",
                          "unwrap_model", "gather"})


def required_fields(cell: Cell, task_name: str) -> tuple[str, ...]:
    fields = list(ALWAYS_REQUIRED)  # (an absent engine is _backend's: "the run had no DeepSpeed engine")
    if cell.processes > 1:
        fields += ["collectives", "collective_elements"]
        if not cell.is_deepspeed and not cell.is_fsdp:
            # DDP's reducer is C++: judged by the ranks' gradients agreeing (FSDP2's gradients
            # are shards, different on every rank: judged by the elements reduce-scattered).
            fields.append("gradients_agreed")
    # (An absent "fsdp" block is _backend's, as an absent engine is: "the run had no FSDP2 units".)
    if autocast_acts(task_name):  # where autocast and half-precision casts show
        fields += ["activation_dtype", "activation_grad_dtype", "eval_activation_dtype"]
    return tuple(fields)


def autocast_acts(task_name: str) -> bool:
    """Autocast acts on some module of the task's model (harness.judge.autocast_site, read from
    the model by running it). A task that cannot be built or run here: assumed to, so its dtypes
    stay required."""
    return _site_of(task_name) is not _NO_SITE


_NO_SITE = "autocast acts nowhere"


def _site_of(task_name: str) -> AutocastSite | str | None:
    """The task's AutocastSite, _NO_SITE when autocast acts nowhere, None when it cannot be probed."""
    from harness.tasks import get_task

    try:
        site = autocast_site(get_task(task_name))
    except Exception:  # the cells' own failure will say why; the judge must not raise for it
        return None
    return _NO_SITE if site is None else site


def _backend(cell: Cell, _record: Record, evidence: dict[str, Any], asked: str) -> str | None:
    deepspeed = evidence.get("deepspeed")
    if cell.is_deepspeed and deepspeed is None:
        return f"{asked}, the run had no DeepSpeed engine ({evidence.get('strategy_class')} ran)"
    if evidence.get("strategy") != cell.strategy:
        return f"{asked}, the run had {evidence.get('strategy')} ({evidence.get('strategy_class')})"
    if evidence.get("world_size") != cell.processes or evidence.get("device") != cell.device:
        return f"{asked}, the run had {evidence.get('device')}{evidence.get('world_size')}"
    sharding = fsdp_mismatch(cell, evidence, asked)
    if sharding is not None:
        return sharding
    if deepspeed is not None:
        if deepspeed.get("zero_stage") != cell.zero_stage:
            return f"{asked}, the engine ran ZeRO stage {deepspeed.get('zero_stage')}"
        if cell.zero_stage == 3 and not deepspeed.get("partitioned_parameters"):
            return f"{asked}, no parameter was partitioned ({deepspeed.get('parameters')} kept whole)"
    return None


def _engine_settings(cell: Cell, _record: Record, evidence: dict[str, Any], asked: str) -> str | None:
    """The DeepSpeed settings in force (defaults included) that would train differently from the
    plain loop: a clip the loop never asked for, the other half precision, another accumulation."""
    if not cell.is_deepspeed:
        return None  # (a plain cell's record with an engine in it failed on _backend already)
    in_force = evidence["deepspeed"]["in_force"]  # a table: _missing and _backend saw to that
    clipping = in_force.get("gradient_clipping")
    if clipping:
        # The loop clips through accelerator.clip_grad_norm_, one step at a time; the engine's
        # config must not clip every step on its own (DeepSpeed's documented default is 1.0).
        return f"{asked}, the engine clips every step at {clipping:g} (gradient_clipping in force)"
    for key, wanted in (("fp16_enabled", cell.precision == "fp16"),
                        ("bf16_enabled", cell.precision == "bf16")):
        if key in in_force and bool(in_force[key]) != wanted:
            return f"{asked}, the engine ran with {key}={in_force[key]}"
    from harness.tasks import get_task

    steps = get_task(cell.task).gradient_accumulation_steps
    if in_force.get("gradient_accumulation_steps", steps) != steps:
        return (f"{asked}, the engine accumulated over {in_force['gradient_accumulation_steps']} "
                f"micro-steps, the task over {steps}")
    return None


def _gradient_reduction(cell: Cell, record: Record, evidence: dict[str, Any], asked: str) -> str | None:
    if cell.processes < 2:
        return None  # one process reduces nothing
    counts = evidence["collectives"]  # required of 2+ processes: _missing saw to that
    if cell.is_deepspeed or cell.is_fsdp:
        # The DeepSpeed engine and FSDP2 reduce through Python, where the calls are counted; each
        # block says how many trainable elements a step must reduce (a table with that field:
        # _backend and _missing saw to that).
        owner = evidence["deepspeed"] if cell.is_deepspeed else evidence["fsdp"]
        # Every optimizer step reduces at least its trainable elements once (more with
        # accumulation or padding); the one-element all-reduces of a norm or an overflow flag
        # do not add up to that.
        elements = evidence["collective_elements"]
        reduced = sum(int(elements.get(name, 0)) for name in GRADIENT_REDUCTIONS)
        # A resumed run's record holds the whole run; its collectives are the destination's only.
        resumed = evidence.get("resume") or {}
        done_before = resumed.get("resumed_after_step", 0) if isinstance(resumed, dict) else 0
        steps = len(record.lrs) - int(done_before)
        needed = int(owner["trainable_elements"]) * steps
        if reduced < needed:
            return (f"{asked}, gradients were not reduced across ranks on every step ({reduced} "
                    f"elements all-reduced or reduce-scattered in backward and optimizer.step, "
                    f"fewer than {needed} = trainable elements x {steps} steps; calls: {counts or 'none'})")
        return None
    agreed = evidence["gradients_agreed"]  # required of a DDP cell: _missing saw to that
    if agreed.get("agreed") != agreed.get("steps"):
        return (f"{asked}, gradients were never all-reduced: the ranks held different gradients at "
                f"{agreed.get('steps', 0) - agreed.get('agreed', 0)} of {agreed.get('steps')} "
                "optimizer steps")
    return None


def _dtypes(cell: Cell, record: Record, evidence: dict[str, Any], asked: str) -> str | None:
    site = _site_of(cell.task)
    if site is _NO_SITE:
        if cell.precision == "fp32":
            return None  # fp32 needs no autocast: nothing to see, nothing missing
        return (f"{asked}, but autocast acts on no module of the task's model, so the cell cannot "
                f"tell {cell.precision} from fp32 and cannot pass (autocast_site: "
                f"{evidence.get('autocast_site', 'not recorded')}). Fix: compute the model through "
                "an op autocast casts (nn.Linear, nn.functional.linear, a matmul), or run the task "
                "at fp32 only")
    wanted = ACTIVATION_DTYPES[cell.precision]
    # Both present when autocast acts (or the task could not be probed): _missing saw to that.
    where = f", {site.describe()}," if isinstance(site, AutocastSite) else ""
    activations = evidence["activation_dtype"]
    if activations != wanted:
        return f"{asked}, the first module autocast acts on{where} computed in {activations}"
    gradients = evidence["activation_grad_dtype"]
    if gradients != wanted:
        return (f"{asked}, the gradient flowing back into the output of a module autocast acts on "
                f"was {gradients}")
    evaluated = evidence["eval_activation_dtype"]  # None: no evaluation forward reached the site
    if record.eval_outputs and evaluated != wanted:
        return (f"{asked}, evaluation computed in {evaluated or 'nothing the evidence saw'} at the "
                f"first module autocast acts on{where} (training computed in {activations})")
    return None


def _loss_scaler(cell: Cell, record: Record, _evidence: dict[str, Any], asked: str) -> str | None:
    if cell.precision == "fp16" and not record.loss_scales:
        return f"{asked}, no loss scaler ran (no loss scale recorded)"
    if cell.precision != "fp16" and record.loss_scales:
        return f"{asked}, a loss scaler ran ({len(record.loss_scales)} loss scales recorded)"
    return None


def _unwrapped(_cell: Cell, _record: Record, evidence: dict[str, Any], asked: str) -> str | None:
    unwrapped = evidence["unwrap_model"]  # required of every cell: _missing saw to that
    if unwrapped.get("is_the_prepared_module") is not True:
        return (f"{asked}, accelerator.unwrap_model(model) returned a {unwrapped.get('class')}, not the "
                "module the loop prepared (what a user saves or inspects after training)")
    return None


def _gathered(_cell: Cell, _record: Record, evidence: dict[str, Any], asked: str) -> str | None:
    gather = evidence["gather"]  # required of every cell: _missing saw to that
    if gather.get("agreed") != gather.get("batches"):
        return (f"{asked}, accelerator.gather of a model output disagreed with gather_for_metrics on "
                f"{gather.get('batches', 0) - gather.get('agreed', 0)} of {gather.get('batches')} eval "
                f"batches ({gather.get('first_disagreement')})")
    return None


CHECKS: tuple[Check, ...] = (_missing, _backend, _engine_settings, _gradient_reduction, _dtypes, _loss_scaler,
                             _unwrapped, _gathered)
