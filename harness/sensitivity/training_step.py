"""Catalog entries in what a training step does with its gradients (loss scaling, gradient
accumulation, clipping) and in the DeepSpeed engine's config, ZeRO partitioning and state dicts:
part of the catalog (harness/sensitivity/catalog.py, in this order), kept apart by subject.

Over 150 lines because it is data, one entry per bug (search and replace texts, the cells, what
it imitates).
"""

from __future__ import annotations

from harness.sensitivity.bug import Bug

STEP_BUGS: tuple[Bug, ...] = (
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
        name="clip_scales_gradients_up",
        area="clipping",
        file="strategies/single_device.py",
        search=("        return torch.nn.utils.clip_grad_norm_(list(parameters), max_norm, "
                "norm_type=norm_type)"),
        replace=("        grads = [p.grad for p in list(parameters) if p.grad is not None]\n"
                 "        total = torch.nn.utils.get_total_norm(grads, norm_type)\n"
                 "        for grad in grads:  # the coefficient is not clamped at 1\n"
                 "            grad.mul_(max_norm / (total + 1e-6))\n"
                 "        return total"),
        select="clip_norm-cpu1-single-fp32",
        affects="clip_norm and (cpu1-single or cpu2-ddp)",
        imitates="a hand-written clip that scales the gradients to the max norm whatever their norm, so a "
                 "step below the threshold is scaled up (documented: torch.nn.utils.clip_grads_with_norm_ "
                 "clamps the coefficient max_norm / (total_norm + 1e-6) at 1, pytorch/pytorch#151554)",
    ),
    Bug(
        name="clip_norm_counts_a_parameter_twice",
        area="clipping",
        file="strategies/single_device.py",
        search=("        return torch.nn.utils.clip_grad_norm_(list(parameters), max_norm, "
                "norm_type=norm_type)"),
        replace=("        params = list(parameters)\n"
                 "        grads = [p.grad for p in params if p.grad is not None]\n"
                 "        total = torch.nn.utils.get_total_norm(grads + grads[-1:], norm_type)\n"
                 "        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)\n"
                 "        return total"),
        select="clip_norm-cpu1-single-fp32",
        affects="clip_norm and (cpu1-single or cpu2-ddp)",
        imitates="one parameter's gradient counted twice in the global norm, so clipped steps are clipped "
                 "too hard (NVIDIA/Megatron-LM#7227: the duplicate of a tied output weight counted in the "
                 "global gradient norm)",
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
        name="unwrap_model_returns_the_engine",
        area="state_dict",
        file="strategies/deepspeed/strategy.py",
        search='        return getattr(model, "module", model) if model is self.engine else model\n',
        replace="        return model  # the DeepSpeed engine, not the module inside it\n",
        select="regression-cpu2-zero2-fp32",
        affects="cpu2-zero",
        imitates="accelerator.unwrap_model handing back the distributed wrapper (the DeepSpeed engine) "
                 "instead of the user's module, which a user then saves or inspects; no number the matrix "
                 "compares moves (huggingface/accelerate#3281: \"it currently returns the distributed "
                 "wrapper\")",
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
    Bug(
        name="scheduler_stepped_per_process",
        area="scheduling",
        file="optimizer.py",
        search="        self.scheduler.step(*args, **kwargs)",
        replace=("        import torch.distributed as dist\n"
                 "        for _ in range(dist.get_world_size() if dist.is_initialized() else 1):\n"
                 "            self.scheduler.step(*args, **kwargs)"),
        # The plain cells' loop never prepares its scheduler; a resumed run does (see above).
        select="classifier-golden-fp32:cpu2-ddp-fp32 or classifier-golden-fp32:cpu2-zero2-fp32",
        imitates="the prepared scheduler stepped once per process at every optimizer step, as Hugging "
                 "Face accelerate's AcceleratedScheduler does by default (split_batches=False): a schedule "
                 "written in optimizer steps ends num_processes times too early "
                 "(huggingface/accelerate#2926: learning rate scheduler stepping too fast on multi-GPU; "
                 "huggingface/transformers#24088)",
    ),
)
