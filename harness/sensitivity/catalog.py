"""The catalog of realistic bugs (docs/sensitivity.md has the table and the measured catch rate).

Each entry changes one thing in a copy of accelerate_core the way a real integration bug does,
names the smallest selection of cells that should expose it, and says which real bug it
imitates. The checkpoint entries (checkpoints.py) are kept apart: that code is being rewritten,
and a patch that stops applying must show up as a catalog error there, not here.

FAST: `python -m harness sensitivity --fast` (about a minute, one launch each): the two evidence
faults of issue 14 (ZeRO-3 silently run as DDP; fp16 autocast disabled), DDP that never
all-reduces, and the fsdp plugin silently building DDP. tests/harness/sensitivity runs two of
them on every CI run (one per launch shape); the numeric catches run in the full catalog
(`nox -s sensitivity`).

Here: the backend and precision choice, DDP and data sharding. Apart: what a training step does
with its gradients and the engine's config and state (training_step.py), checkpoints
(checkpoints.py), FSDP (fsdp.py), the short last batch (short_batches.py) and the small-effect entries
(subtle.py; half_precision.py, the 16-bit copies
standing in for fp32 master weights).
"""

from __future__ import annotations

from harness.sensitivity.bug import Bug
from harness.sensitivity.checkpoints import CHECKPOINT_BUGS
from harness.sensitivity.fsdp import FSDP_BUGS
from harness.sensitivity.half_precision import HALF_PRECISION_BUGS
from harness.sensitivity.samplers import SAMPLER_BUGS
from harness.sensitivity.short_batches import SHORT_BATCH_BUGS
from harness.sensitivity.structures import STRUCTURE_BUGS
from harness.sensitivity.subtle import SUBTLE_BUGS
from harness.sensitivity.training_step import STEP_BUGS

CORE_BUGS: tuple[Bug, ...] = (
    # ------------------------------------------------------------------ backend / precision choice
    Bug(
        name="deepspeed_ignored_on_cpu",
        area="precision_fallback",
        file="connector.py",
        search="backend = resolve_backend(deepspeed_plugin, launch, process.world_size, fsdp_plugin)",
        replace=("backend = resolve_backend(None if use_cpu else deepspeed_plugin, launch, "
                 "process.world_size, fsdp_plugin)"),
        select="regression-cpu2-zero3-fp32",
        affects="cpu2-zero",
        imitates="Hugging Face accelerate with cpu=True and a DeepSpeed plugin silently runs plain "
                 "multi-process CPU training (no engine): measured with accelerate 1.15.0 (a DeepSpeedPlugin "
                 "passed to the Accelerator likewise silently not activated: huggingface/accelerate#354)",
    ),
    Bug(
        name="fp16_autocast_off_on_cpu",
        area="autocast",
        file="precision/amp.py",
        search="return torch.autocast(device_type=self.device_type, dtype=self.dtype)",
        replace=("return torch.autocast(device_type=self.device_type, dtype=self.dtype,\n"
                 "                              enabled=not (self.device_type == 'cpu'\n"
                 "                                           and self.mixed_precision == 'fp16'))"),
        select="classifier-cpu1-single-fp16",
        affects="fp16 and (cpu1-single or cpu2-ddp)",
        imitates="mixed_precision='fp16' on CPU silently trains in fp32 with autocast off (accelerate 1.15.0 "
                 "measured; torch CPU autocast lacked fp16 before 2.x) (pytorch/pytorch#96093: CPU autocast "
                 "with dtype=torch.half was disabled with a warning before CPU fp16 AMP)",
    ),
    Bug(
        name="bf16_falls_back_to_fp32_on_cpu",
        area="precision_fallback",
        file="connector.py",
        search='    if mixed_precision == "no":\n        return FP32Precision()',
        replace=('    if mixed_precision == "no" or (mixed_precision == "bf16" '
                 'and process.device.type == "cpu"):\n'
                 "        return FP32Precision()"),
        select="classifier-cpu1-single-bf16",
        affects="bf16 and (cpu1-single or cpu2-ddp)",
        imitates="bf16 silently ignored on CPU (older accelerate disabled CPU bf16 autocast below torch 1.10 "
                 "without a warning) (huggingface/accelerate#906: amp bf16 did not work for cpu in an env "
                 "with cuda)",
    ),
    Bug(
        name="bf16_autocast_not_entered",
        area="autocast",
        file="precision/amp.py",
        search="return torch.autocast(device_type=self.device_type, dtype=self.dtype)",
        replace=("return torch.autocast(device_type=self.device_type, dtype=self.dtype,\n"
                 "                              enabled=self.mixed_precision != 'bf16')"),
        # The two tasks whose bf16 goldens were bit-identical to fp32 until their prediction
        # went through nn.functional.linear: this bug passed them at 0% of tolerance then.
        select="regression-cpu1-single-bf16 or scalar-cpu1-single-bf16",
        affects="bf16 and (cpu1-single or cpu2-ddp)",
        imitates="bf16 silently runs fp32: the amp plugin accepts mixed_precision='bf16' but its forward "
                 "never enters autocast (an `enabled` flag meant for the fp16 path), while the precision "
                 "object and strategy still say bf16 (huggingface/lerobot#3912: accelerator.autocast() was a "
                 "no-op, bfloat16 only cast the parameters)",
    ),
    Bug(
        name="autocast_in_training_only",
        area="autocast",
        file="precision/base.py",
        search="            with autocast():\n                return original(*args, **kwargs)",
        replace=("            if not module.training:  # evaluation in full precision\n"
                 "                return original(*args, **kwargs)\n"
                 "            with autocast():\n                return original(*args, **kwargs)"),
        select="classifier-cpu1-single-bf16",
        # The amp path only. A ZeRO engine's weights are half already, so its evaluation computes in
        # half with or without autocast (measured: its 48 fp16/bf16 CPU cells pass with the patch);
        # FSDP2 casts parameters itself and wraps no forward in autocast (precision/fsdp.py).
        affects="(bf16 or fp16) and (cpu1-single or cpu2-ddp)",
        imitates="mixed precision applied to the training forward only, so evaluation silently runs in "
                 "fp32 and its outputs differ from what the same model gives in training precision "
                 "(huggingface/transformers#43302: training and evaluation forwards under different "
                 "autocast, inconsistent dtypes between them)",
    ),
    Bug(
        name="bf16_autocasts_to_fp16",
        area="autocast",
        file="precision/amp.py",
        search='_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}',
        replace='_DTYPES = {"fp16": torch.float16, "bf16": torch.float16}',
        select="classifier-cpu1-single-bf16",
        affects="bf16 and (cpu1-single or cpu2-ddp)",
        imitates="a half-precision dtype mix-up: bf16 requested, float16 autocast (no loss scaler then, so "
                 "gradients can underflow) (OpenPipe/ART#663: fp16 autocast defaulted for bf16 models)",
    ),
    Bug(
        name="deepspeed_fp16_falls_back_to_fp32",
        area="precision_fallback",
        file="precision/deepspeed.py",
        search='            return {"fp16": dict(GRAD_SCALER_EQUIVALENT_FP16), "bf16": {"enabled": False}}',
        replace='            return {"fp16": {"enabled": False}, "bf16": {"enabled": False}}',
        select="regression-cpu2-zero1-fp16",
        affects="cpu2-zero and fp16",
        imitates="DeepSpeed fp16 refused on a CPU without native fp16 and silently replaced by fp32 instead "
                 "of an error (what a 'fallback' in an integration does) (upstream DeepSpeed raises \"Type "
                 "fp16 is not supported.\" there instead: deepspeedai/DeepSpeed#5718)",
    ),
    # ------------------------------------------------------------------ DDP and data sharding
    Bug(
        name="ddp_gradients_summed",
        area="ddp",
        file="strategies/ddp.py",
        search="        return DistributedDataParallel(model, device_ids=device_ids)",
        replace=("        wrapped = DistributedDataParallel(model, device_ids=device_ids)\n\n"
                 "        def summed(_state, bucket):  # type: ignore[no-untyped-def]  # no average\n"
                 "            import torch.distributed as dist\n"
                 "            work = dist.all_reduce(bucket.buffer(), async_op=True)\n"
                 "            return work.get_future().then(lambda fut: fut.value()[0])\n\n"
                 "        wrapped.register_comm_hook(None, summed)\n"
                 "        return wrapped"),
        select="regression-cpu2-ddp-fp32",
        affects="cpu2-ddp",
        imitates="gradients summed instead of averaged across ranks (a custom comm hook or a loss not "
                 "divided by world size: the effective lr grows with the world size) (pytorch/pytorch#42399: "
                 "with a comm hook registered, DDP no longer predivides gradients by world_size)",
    ),
    Bug(
        name="ddp_never_syncs",
        area="ddp",
        file="strategies/ddp.py",
        search="        return DistributedDataParallel(model, device_ids=device_ids)",
        replace=("        wrapped = DistributedDataParallel(model, device_ids=device_ids)\n"
                 "        wrapped.require_backward_grad_sync = False  # left over from a no_sync() context\n"
                 "        return wrapped"),
        select="regression-cpu2-ddp-fp32",
        affects="cpu2-ddp",
        imitates="gradient accumulation's no_sync() left on: DDP never all-reduces (accelerate issues on "
                 "sync_gradients staying False after accumulate()) (huggingface/picotron#5: "
                 "require_backward_grad_sync left False, a rank never synchronizes its gradient)",
    ),
    Bug(
        name="every_rank_same_shard",
        area="sharding",
        file="data.py",
        search="        start = self.rank * self.batch_size",
        replace="        start = 0",
        select="regression-cpu2-ddp-fp32",
        affects="cpu2",
        imitates="a sampler that ignores the rank (DistributedSampler missing or set_epoch/rank not passed): "
                 "every rank trains on the same samples (k2-fsa/icefall#1616: identical batches across GPUs "
                 "until rank and world_size were passed to the sampler)",
    ),
    Bug(
        name="shuffle_order_repeats_every_epoch",
        area="sharding",
        file="data.py",
        search="            order = draw()\n",
        replace="            order = self.current_order or draw()\n",
        select="shuffle-cpu2-ddp-fp32",
        affects="shuffle and cpu",
        imitates="torch.utils.data.DistributedSampler's documented trap: without set_epoch() before each "
                 "epoch 'the same ordering will be always used'; here every epoch after the first repeats "
                 "the first one's order (pytorch/pytorch#31771: DistributedSampler \"each epoch samples the "
                 "data in the same order\")",
    ),
    Bug(
        name="shuffle_seeded_with_seed_plus_epoch",
        area="sharding",
        file="data.py",
        search="order = lambda _epoch: self._pass_order(lambda: list(iter(shuffling)))  # noqa: E731",
        replace=("order = lambda epoch: self._pass_order(lambda: legacy_shuffled_order(num_samples, "
                 "int((shuffling.generator or torch.default_generator).initial_seed()), epoch))"
                 "  # noqa: E731"),
        select="shuffle-cpu1-single-fp32",
        affects="shuffle and cpu",
        imitates="a sharding sampler that seeds its own permutation with seed + epoch (DistributedSampler's "
                 "rule; Accelerate's opt-in use_seedable_sampler; this core before checkpoint format 3) "
                 "instead of drawing from the user's DataLoader: other batches than plain PyTorch's from the "
                 "first step on, on one process too (huggingface/accelerate#2057 added the seedable sampler; "
                 "opt-in per huggingface/accelerate#2333)",
    ),
    Bug(
        name="gather_for_metrics_keeps_padding",
        area="sharding",
        file="accelerator.py",
        search="if loader is not None and self._data_state.end_of_dataloader and loader.remainder:",
        replace=("if False and loader is not None and self._data_state.end_of_dataloader "
                 "and loader.remainder:"),
        select="regression-cpu2-ddp-fp32",
        affects="cpu2",
        imitates="gather_for_metrics returning the samples repeated to even out the last batch (accelerate "
                 "issues on duplicated eval samples in the last batch) (huggingface/accelerate#540: the last "
                 "batch is padded with duplicates of the last sample, to be dropped for metrics)",
    ),
    Bug(
        name="gather_for_metrics_truncates_tensors_only",
        area="sharding",
        file="ops.py",
        search="    return map_tensors(one, data)\n\n\ndef broadcast_object",
        replace="    return one(data) if isinstance(data, torch.Tensor) else data\n\n\ndef broadcast_object",
        select="regression-cpu2-ddp-fp32",
        affects="cpu2",
        imitates="gather_for_metrics dropping the last batch's repeated samples from a bare tensor only, so "
                 "the (predictions, references) tuple of Hugging Face's examples keeps the duplicates and "
                 "every metric counts them (huggingface/accelerate#540: the last batch is padded with "
                 "duplicates, to be dropped for metrics; huggingface/accelerate#1925: gather_for_metrics "
                 "deduplicates only what it knows how to walk)",
    ),
    Bug(
        name="gather_wrong_rank_order",
        area="sharding",
        file="ops.py",
        search="    return torch.cat(parts, dim=0).to(tensor.dtype)",
        replace="    return torch.cat(parts[::-1], dim=0).to(tensor.dtype)",
        select="classifier-cpu2-ddp-fp32",
        affects="cpu2",
        imitates="gathered outputs concatenated out of rank order (predictions no longer line up with their "
                 "labels) (open-mmlab/mmpretrain#173: distributed test results no longer in gt_label order)",
    ),
    Bug(
        name="reduce_mean_is_sum",
        area="sharding",
        file="ops.py",
        search="        if reduction == \"mean\":\n            out = out / world",
        replace="        if reduction == \"mean\":\n            out = out",
        select="regression-cpu2-ddp-fp32",
        affects="cpu2",
        imitates="reduce(..., 'mean') returning the sum: logged losses scale with the world size "
                 "(huggingface/accelerate#745: reduction on distributed systems only returned the sum)",
    ),
)

CATALOG: tuple[Bug, ...] = (CORE_BUGS + STRUCTURE_BUGS + SHORT_BATCH_BUGS + SAMPLER_BUGS + STEP_BUGS
                             + CHECKPOINT_BUGS + FSDP_BUGS + SUBTLE_BUGS + HALF_PRECISION_BUGS)

FAST: tuple[str, ...] = (
    "deepspeed_ignored_on_cpu",
    "fp16_autocast_off_on_cpu",
    "ddp_never_syncs",
    "fsdp_plugin_builds_ddp",  # FSDP is part of torch: runs where deepspeed is absent too
)


def by_name(names: list[str] | tuple[str, ...]) -> list[Bug]:
    known = {bug.name: bug for bug in CATALOG}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise KeyError(f"no catalog entry named {', '.join(map(repr, unknown))}. Valid: "
                       f"{', '.join(sorted(known))}. Fix: use a name that "
                       "`python -m harness sensitivity --list` prints")
    return [known[name] for name in names]
