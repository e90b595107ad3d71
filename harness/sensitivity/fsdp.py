"""Catalog entries for the FSDP2 backend (accelerate_core/strategies/fsdp/,
precision/fsdp.py, the connector's fsdp rules), exposed by the fsdp cells and the fsdp resume
pairs (docs/fsdp.md, docs/sensitivity.md).

Kept apart, as checkpoints.py is, because that backend is new and still changing: when a patch's
search text no longer occurs in the core, `python -m harness sensitivity` reports a catalog
error for it (and tests/harness/sensitivity fails), never a catch. Rewrite the entry then.
"""

from __future__ import annotations

from harness.sensitivity.bug import Bug

FSDP_BUGS: tuple[Bug, ...] = (
    Bug(
        name="fsdp_plugin_builds_ddp",
        area="fsdp",
        file="connector.py",
        search=("        name = backend\n        strategy_cls = load_strategy_class(name)\n"
                "        strategy = strategy_cls(process, "
                "build_precision(backend, precision_name, process),  "
                "# type: ignore[call-arg]\n                                plugin=fsdp)"),
        replace=("        name = \"ddp\"  # the plugin was checked, then DDP built: FSDP never runs\n"
                 "        strategy_cls = load_strategy_class(name)\n"
                 "        strategy = strategy_cls(process, build_precision(name, precision_name, process))"),
        # fp32: FSDP2 and DDP are the same math there, so only the evidence can tell them apart.
        select="regression-cpu2-fsdp-fp32",
        affects="cpu2-fsdp",
        imitates="an FSDP config accepted and then ignored: the backend falls back to plain data parallelism "
                 "(the way a DeepSpeed plugin is ignored with cpu=True, measured with accelerate 1.15.0 for "
                 "DeepSpeed): every rank keeps the whole model, nothing is sharded (no upstream report found "
                 "for FSDP; imitates the kind of bug, the DeepSpeed analogue: huggingface/accelerate#354)",
    ),
    Bug(
        name="fsdp_fully_shard_skipped",
        area="fsdp",
        file="strategies/fsdp/wrap.py",
        search=("        fully_shard(module, mesh=mesh, reshard_after_forward=plugin.reshard_after_forward,\n"
                "                    mp_policy=precision.policy(name == ROOT, fp32=is_batchnorm(module)),\n"
                "                    offload_policy=offload)"),
        replace="        pass  # fully_shard never applied: the model stays whole on every rank",
        select="regression-cpu2-fsdp-fp32",
        affects="cpu2-fsdp",
        imitates="the wrapping step silently skipped (fully_shard behind a condition that is false, no root "
                 "unit): the strategy reports units while the model trains whole and unreduced on every rank "
                 "(no upstream report found; imitates the kind of bug)",
    ),
    Bug(
        name="fsdp_reduce_in_half",
        area="fsdp",
        file="precision/fsdp.py",
        search=("return MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32, "
                "output_dtype=output)"),
        replace="return MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=compute, output_dtype=output)",
        select="classifier-cpu2-fsdp-bf16",
        affects="cpu2-fsdp and (bf16 or fp16)",
        imitates="gradients reduce-scattered in the half dtype: FSDP2's own default when only param_dtype is "
                 "set (reduce_dtype None falls back to param_dtype), a precision loss in every averaged "
                 "gradient (documented: PyTorch MixedPrecisionPolicy, reduce_dtype \"If this is None but "
                 "param_dtype is not None, then the reduction uses the compute dtype\")",
    ),
    Bug(
        name="fsdp_root_not_wrapped",
        area="fsdp",
        file="strategies/fsdp/wrap.py",
        search="    units = [*names, ROOT]",
        replace="    units = names  # the root never becomes a unit",
        select="classifier-cpu2-fsdp-bf16 or lm-cpu2-fsdp-fp32",
        affects="cpu2-fsdp",
        imitates="a wrap policy that shards the blocks but not the root module: parameters outside the "
                 "blocks (lm's tied embedding and head) stay whole and unreduced by FSDP, and no root unit "
                 "casts the outputs back to fp32 (Tencent-Hunyuan/UniRL#7: embed and lm_head outside every "
                 "fully_shard group stayed replicated)",
    ),
    Bug(
        name="fsdp_load_leaves_parameters",
        area="fsdp",
        file="strategies/fsdp/state.py",
        search="    set_model_state_dict(model, cast(dict[str, Any], state), options=TO_EVERY_RANK)",
        replace="    pass  # the full state was read, never copied into the shards",
        select="classifier-cpu2-ddp-fp32:cpu2-fsdp-fp32 or classifier-cpu2-fsdp-fp32:cpu2-fsdp-fp32",
        imitates="an FSDP checkpoint that resumes like a random init: the state is read but the "
                 "sharded parameters are never set from it (Lightning-AI/pytorch-lightning#13500)",
    ),
    Bug(
        name="fsdp_clip_on_local_shard",
        area="fsdp",
        file="strategies/fsdp/strategy.py",
        search="        norm = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)",
        replace=("        local = [p.grad.to_local() for p in params if p.grad is not None]  # a shard\n"
                 "        norm = torch.linalg.vector_norm(torch.stack("
                 "[torch.linalg.vector_norm(g, norm_type) for g in local]), norm_type)\n"
                 "        for g in local:\n"
                 "            g.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))"),
        select="clip_norm-cpu2-fsdp-fp32",
        affects="clip_norm-cpu2-fsdp",
        imitates="gradient clipping by each rank's shard norm instead of the global norm: ranks clip their "
                 "shards by different factors (the norm of a shard is smaller than the whole's) "
                 "(pytorch/pytorch#170862: clip_grad_norm_ under FSDP2 \"returns the norm of partial (local) "
                 "parameters\"; pytorch/pytorch#72548)",
    ),
    Bug(
        name="fsdp_master_weights_in_half",
        area="fsdp",
        file="strategies/fsdp/strategy.py",
        search="            model.to(self.root_device)\n",
        replace=("            model.to(self.root_device, dtype=self.precision.param_dtype or torch.float32)"
                 "  # half masters\n"),
        select="classifier-cpu2-fsdp-bf16",
        affects="cpu2-fsdp and (bf16 or fp16)",
        imitates="the model cast to the half dtype before sharding, so the sharded master weights the "
                 "optimizer steps are bf16, where DeepSpeed and amp keep fp32 masters: small updates round "
                 "away (huggingface/accelerate#2624: FSDP needed a larger learning rate than DeepSpeed; "
                 "huggingface/accelerate#3979: the FSDP2 fp32 upcast a silent no-op)",
    ),
    Bug(
        name="fsdp_optimizer_keeps_replaced_params",
        area="fsdp",
        file="strategies/fsdp/strategy.py",
        search="            fsdp_state.swap_optimizer_params(optimizer, self._replaced)\n",
        replace="            pass  # the optimizer keeps the parameters fully_shard replaced\n",
        select="regression-cpu2-fsdp-fp32",
        affects="cpu2-fsdp",
        imitates="an optimizer built before prepare() left pointing at the parameters fully_shard replaced "
                 "with DTensors: it steps tensors nothing reads any more, and the model never trains "
                 "(torch's FSDP documentation: build the optimizer after sharding; "
                 "huggingface/accelerate#3256)",
    ),
    Bug(
        name="fsdp_state_dict_local_shards",
        area="fsdp",
        file="strategies/fsdp/state.py",
        search=("    state = cast(dict[str, torch.Tensor], "
                "get_model_state_dict(model, options=TO_EVERY_RANK))"),
        replace=("    state = {k: (v.to_local() if isinstance(v, DTensor) else v)  # local shards\n"
                 "             for k, v in model.state_dict().items()}"),
        select="classifier-cpu2-fsdp-fp32",
        affects="cpu2-fsdp",
        imitates="get_state_dict handing out each rank's local shards (dim-0 chunks) instead of the "
                 "gathered full tensors: a 'full' state dict that only an FSDP run of the same world "
                 "size can load (pytorch/pytorch#73043: FSDP's local_state_dict \"returns local shards\", "
                 "to be reloaded by FSDP only; facebookresearch/d2go#512: checkpoints saved as local "
                 "state dicts could not be loaded directly)",
    ),
    Bug(
        name="fsdp_reshard_after_backward_left_off",
        area="fsdp",
        file="strategies/fsdp/wrap.py",
        search="    params = list(model.named_parameters())\n    return ShardingReport(",
        replace=("    model.set_reshard_after_backward(False)  # meant for accumulation micro-batches only\n"
                 "    params = list(model.named_parameters())\n    return ShardingReport("),
        select="regression-cpu2-fsdp-fp32",
        affects="cpu2-fsdp",
        imitates="resharding after backward turned off (the ZeRO-1-like accumulation recipe) and never "
                 "turned back on for the micro-batch before optimizer.step(): the unsharded parameters "
                 "gathered before the step stay registered, so the next forward computes with the "
                 "old weights (measured with torch 2.13.0 on 2 gloo ranks: step 1 repeats step 0's "
                 "loss) (pytorch/pytorch#124319: set_reshard_after_backward(is_last_microbatch) in the "
                 "accumulation loop; pytorch/pytorch#149029: reshard_after_forward misused)",
    ),
)
