"""The catalog of realistic bugs (docs/sensitivity.md has the table and the measured catch rate).

Each entry changes one thing in a copy of accelerate_core the way a real integration bug does,
names the smallest selection of cells that should expose it, and says which real bug it
imitates. The checkpoint entries (checkpoints.py) are kept apart: that code is being rewritten,
and a patch that stops applying must show up as a catalog error there, not here.

FAST: the subset CI runs through tests/harness/sensitivity (about a minute, one launch each):
the two evidence faults of issue 14 (ZeRO-3 silently run as DDP; fp16 autocast disabled), DDP
that never all-reduces, and the fsdp plugin silently building DDP. The numeric catches run in
the full catalog (`nox -s sensitivity`).

Over 300 lines because it is data, one entry per bug (search and replace texts, the cells, what
it imitates); the newer backends' entries are apart (checkpoints.py, fsdp.py).
"""

from __future__ import annotations

from harness.sensitivity.bug import Bug
from harness.sensitivity.checkpoints import CHECKPOINT_BUGS
from harness.sensitivity.fsdp import FSDP_BUGS
from harness.sensitivity.subtle import SUBTLE_BUGS

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
    # ------------------------------------------------------------------ loss scaling
    Bug(
        name="overflow_step_not_skipped",
        area="loss_scaling",
        file="precision/amp.py",
        search="        self.scaler.step(optimizer)\n",
        replace="        optimizer.step()  # skipped the scaler: inf/NaN steps are applied\n",
        select="regression-cpu1-single-fp16",
        affects="fp16 and (cpu1-single or cpu2-ddp)",
        imitates="an optimizer step taken outside GradScaler.step, so overflowed (inf/NaN) steps are applied "
                 "instead of skipped (documented: PyTorch AMP examples, \"If these gradients do not contain "
                 "infs or NaNs, optimizer.step() is then called, otherwise, optimizer.step() is skipped\")",
    ),
    Bug(
        name="deepspeed_hysteresis_default",
        area="deepspeed_config",
        file="precision/deepspeed.py",
        search='    "hysteresis": 1,',
        replace='    "hysteresis": 2,',
        select="regression-cpu2-zero2-fp16",
        affects="cpu2-zero and fp16",
        imitates="DeepSpeed's default fp16 hysteresis of 2: the scale is lowered only on the second "
                 "overflow, unlike torch's GradScaler (loss-scale sequences differ) "
                 "(deepspeedai/DeepSpeed#931: \"Attempted loss scale: 65536, but hysteresis is 2. Reducing "
                 "hysteresis to 1\")",
    ),
    Bug(
        name="deepspeed_initial_scale_2_32",
        area="deepspeed_config",
        file="precision/deepspeed.py",
        search='    "initial_scale_power": 16,',
        replace='    "initial_scale_power": 32,',
        select="regression-cpu2-zero1-fp16",
        affects="cpu2-zero and fp16",
        imitates="DeepSpeed's old initial_scale_power default of 32 (2**32 start: many early steps skipped "
                 "where GradScaler starts at 2**16) (deepspeedai/DeepSpeed#2663: default initial_scale_power "
                 "lowered from 32 to 16)",
    ),
    Bug(
        name="deepspeed_overflow_not_reported",
        area="loss_scaling",
        file="strategies/deepspeed/strategy.py",
        search="        return overflow\n",
        replace="        return False\n",
        select="regression-cpu2-zero2-fp16",
        affects="cpu2-zero and fp16",
        imitates="optimizer.is_overflow always False under DeepSpeed: the loop steps its lr scheduler on "
                 "skipped steps (DeepSpeed/accelerate issues on schedulers advancing past overflow steps) "
                 "(the same with fused AdamW under AMP: huggingface/accelerate#4242)",
    ),
    # ------------------------------------------------------------------ gradient accumulation
    Bug(
        name="backward_divides_by_accumulation",
        area="accumulation",
        file="accelerator.py",
        search="        self._strategy.backward(loss, model)",
        replace="        self._strategy.backward(loss / self.gradient_accumulation_steps, model)",
        select="sgd_accum-cpu1-single-fp32",
        # Every backend's backward goes through the facade: fsdp and ZeRO cells of the accumulating
        # task too (with gradient_accumulation_steps 1 the division changes nothing).
        affects="sgd_accum and cpu",
        imitates="Hugging Face accelerate's backward divides the loss by the accumulation steps itself; a "
                 "loop that divides too trains with gradients / steps**2 (huggingface/accelerate#3533)",
    ),
    Bug(
        name="deepspeed_scale_wrt_gas_default",
        area="accumulation",
        file="strategies/deepspeed/strategy.py",
        search="backward(loss, scale_wrt_gas=False)",
        replace="backward(loss)",
        select="sgd_accum-cpu2-zero2-fp32",
        affects="sgd_accum-cpu2-zero",
        imitates="DeepSpeed's engine.backward default scale_wrt_gas=True divides the (already divided) loss "
                 "by gradient_accumulation_steps again (deepspeedai/DeepSpeed#7439: \"By default DS will "
                 "scale loss by gradient accumulation steps\"; huggingface/transformers#35808)",
    ),
    Bug(
        name="deepspeed_accumulation_not_passed",
        area="accumulation",
        file="strategies/deepspeed/strategy.py",
        search="gradient_accumulation_steps=self.plugin.gradient_accumulation_steps or 1,",
        replace="gradient_accumulation_steps=1,",
        select="sgd_accum-cpu2-zero1-fp32",
        affects="sgd_accum-cpu2-zero",
        imitates="the Accelerator's gradient_accumulation_steps not written into the DeepSpeed config "
                 "(accelerate issues on gradient_accumulation_steps mismatch with the DeepSpeed config) "
                 "(huggingface/accelerate#3369; the override this drops: huggingface/accelerate#698)",
    ),
    # ------------------------------------------------------------------ clipping
    Bug(
        name="clip_scaled_fp16_gradients",
        area="clipping",
        file="strategies/single_device.py",
        search="        for optimizer in self._optimizers:\n            self.precision.unscale_(optimizer)\n",
        replace="",
        select="clip_norm-cpu1-single-fp16",
        affects="clip_norm-cpu1-single-fp16",  # the only path with a loss scale to unscale
        imitates="clipping fp16 gradients still multiplied by the loss scale (the mistake torch's AMP docs "
                 "warn of: unscale_ before clip_grad_norm_) (documented: PyTorch AMP examples, \"All "
                 "gradients produced by scaler.scale(loss).backward() are scaled\")",
    ),
    Bug(
        name="deepspeed_clip_ignored",
        area="clipping",
        file="strategies/deepspeed/strategy.py",
        search=("            optimizer.clip_grad = float(max_norm)  "
                "# for the next step only, see optimizer_step"),
        replace="            pass  # clip_grad_norm_ is a no-op under DeepSpeed",
        select="clip_norm-cpu2-zero2-fp32",
        affects="clip_norm-cpu2-zero",
        imitates="accelerator.clip_grad_norm_ silently doing nothing under DeepSpeed (accelerate returns "
                 "None there and leaves clipping to the config) (huggingface/transformers#37566: "
                 "accelerate's clip_grad_norm_ under DeepSpeed is \"return None\")",
    ),
    Bug(
        name="deepspeed_default_clip_1",
        area="deepspeed_config",
        file="strategies/deepspeed/config.py",
        search='    m.default("gradient_clipping", 0.0)',
        replace='    m.default("gradient_clipping", 1.0)',
        select="sgd_accum-cpu2-zero1-fp32",
        affects="cpu2-zero",
        imitates="a gradient_clipping of 1.0 filled in by default ('auto' resolved to the HF Trainer's "
                 "max_grad_norm=1.0) where the loop asked for no clipping (DeepSpeed itself now defaults "
                 "gradient_clipping to 1.0: deepspeedai/DeepSpeed#8068)",
    ),
    # ------------------------------------------------------------------ ZeRO partitioning and state dicts
    Bug(
        name="user_deepspeed_config_dropped",
        area="zero",
        file="strategies/deepspeed/config.py",
        search="    m = _Merger(load_user_config(plugin.config))",
        replace="    m = _Merger({})  # the plugin's config never read",
        select="regression-cpu2-zero3-fp32",
        affects="cpu2-zero3",
        imitates="a DeepSpeed config given to the plugin silently ignored when keyword settings are also "
                 "given (ZeRO-3 then keeps small parameters whole) (huggingface/accelerate#2298: "
                 "DeepSpeedPlugin ignores deepspeed_config.train_micro_batch_size_per_gpu)",
    ),
    Bug(
        name="zero_stage_off_by_one",
        area="zero",
        file="strategies/deepspeed/config.py",
        search='    m.require("zero_optimization.stage", plugin.zero_stage, ',
        replace='    m.require("zero_optimization.stage", max(plugin.zero_stage - 1, 0), ',
        select="regression-cpu2-zero3-fp32",
        affects="cpu2-zero",
        imitates="the ZeRO stage mis-mapped between a launcher setting and the DeepSpeed config (e.g. an "
                 "enum index off by one) (huggingface/accelerate#1231: deepspeed_plugin.zero_stage read as 2 "
                 "for a stage-3 ds_config file)",
    ),
    Bug(
        name="zero3_state_dict_local_shards",
        area="state_dict",
        file="strategies/deepspeed/state.py",
        search="            full = safe_get_full_fp32_param(tensor)\n",
        replace=("            full = tensor.ds_tensor.detach().clone() if hasattr(tensor, 'ds_tensor') "
                 "else safe_get_full_fp32_param(tensor)\n"),
        select="classifier-cpu2-zero3-fp32",
        affects="cpu2-zero3",
        imitates="ZeRO-3 saving each rank's partition instead of the gathered weights (DeepSpeed and "
                 "transformers issues on empty or shape-(0,) weights saved under ZeRO-3) "
                 "(deepspeedai/DeepSpeed#2413; huggingface/transformers#20082)",
    ),
    Bug(
        name="zero_state_dict_drops_buffers",
        area="state_dict",
        file="strategies/deepspeed/state.py",
        search="        else:  # buffers are not partitioned\n",
        replace="        elif False:  # buffers dropped\n",
        select="classifier-cpu2-zero2-fp32",
        affects="cpu2-zero",
        imitates="buffers missing from a consolidated ZeRO state dict (DeepSpeed zero_to_fp32 issues on "
                 "non-parameter state) (deepspeedai/DeepSpeed#1101: zero_to_fp32.py drops buffers)",
    ),
    Bug(
        name="deepspeed_steps_the_scheduler_too",
        area="deepspeed_config",
        file="strategies/deepspeed/strategy.py",
        search="                config=self.config,\n                dist_init_required=False,",
        replace=("                config=self.config,\n"
                 "                lr_scheduler=schedulers[0] if schedulers else None,\n"
                 "                dist_init_required=False,"),
        # A resume cell: the plain cells run the user loop, which never passes its scheduler
        # to prepare(), so the engine could not get it there (the first full run missed it on
        # classifier-cpu2-zero1-fp32 for that reason); checkpointed runs prepare it.
        select="classifier-golden-fp32:cpu2-zero1-fp32",
        imitates="the user's lr scheduler handed to the DeepSpeed engine, which steps it inside "
                 "engine.step() while the loop steps it too (lr advanced twice per step) "
                 "(Lightning-AI/pytorch-lightning#9771: DeepSpeed and Lightning both calling the scheduler)",
    ),
)

CATALOG: tuple[Bug, ...] = CORE_BUGS + CHECKPOINT_BUGS + FSDP_BUGS + SUBTLE_BUGS

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
