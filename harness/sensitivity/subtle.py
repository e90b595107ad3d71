"""Catalog entries whose effect is small by nature: a reduction or normalisation that rounds or
shifts every value a little, where the other entries move a number by 1e3-1e4x its tolerance.
They are what shows that a tolerance is tight (an entry caught within 10x of its tolerance
wherever it is caught is "subtle" in the kill matrix, harness/sensitivity/kill.py), and their
misses say where a tolerance lets a real bug through (docs/sensitivity.md).

Every one changes numbers only, never the evidence a cell records: a catch is a comparison.
"""

from __future__ import annotations

from harness.sensitivity.bug import Bug

_DDP_WRAP = "        return DistributedDataParallel(model, device_ids=device_ids)"


def _ddp_hook(hook: str) -> str:
    return ("        ddp = DistributedDataParallel(model, device_ids=device_ids)\n"
            "        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
            f"        ddp.register_comm_hook(None, default_hooks.{hook})\n"
            "        return ddp")


SUBTLE_BUGS: tuple[Bug, ...] = (
    Bug(
        name="ddp_fp16_compress_hook",
        area="ddp",
        file="strategies/ddp.py",
        search=_DDP_WRAP,
        replace=_ddp_hook("fp16_compress_hook"),
        select="regression-cpu2-ddp-fp32",
        affects="cpu2-ddp",
        imitates="DDP gradients compressed to fp16 for the all-reduce (Accelerate's "
                 "DistributedDataParallelKwargs(comm_hook=DDPCommunicationHookType.FP16)): every averaged "
                 "gradient rounded to fp16, in fp32 training too (documented: PyTorch DDP communication "
                 "hooks, fp16_compress_hook \"casts GradBucket tensor to half-precision floating-point "
                 "format\")",
    ),
    Bug(
        name="zero_communication_fp16",
        area="deepspeed_config",
        file="strategies/deepspeed/config.py",
        search='    m.default("communication_data_type", "fp32")',
        replace='    m.default("communication_data_type", "fp16")',
        select="regression-cpu2-zero2-fp32",
        affects="cpu2-zero",
        imitates="ZeRO's gradient reduction in fp16 in an fp32 or bf16 run (a config template's "
                 "communication_data_type, or DeepSpeed's old hard-coded default) "
                 "(deepspeedai/DeepSpeed#2071: FP16 used for all reduce even if BFLOAT16 is enabled)",
    ),
    Bug(
        name="zero_communication_bf16",
        area="deepspeed_config",
        file="strategies/deepspeed/config.py",
        search='    m.default("communication_data_type", "fp32")',
        replace='    m.default("communication_data_type", "bf16")',
        select="regression-cpu2-zero2-fp32",
        affects="cpu2-zero",
        imitates="ZeRO's gradient reduction in bf16 in an fp32 run: older DeepSpeed reduced in the model's "
                 "dtype unless communication_data_type said otherwise, and a bf16 template carries it over "
                 "(deepspeedai/DeepSpeed#3370: default communication_data_type for bf16, a bisected "
                 "regression)",
    ),
    Bug(
        name="sync_batchnorm_eps_dropped",
        area="ddp",
        file="sync_batchnorm.py",
        search="            invstd = torch.rsqrt(var + eps)",
        replace="            invstd = torch.rsqrt(var)",
        select="batchnorm_sync-cpu2-ddp-fp32",
        affects="batchnorm_sync and cpu2",
        imitates="the synced normalisation divides by the batch's standard deviation without the layer's eps "
                 "(documented: PyTorch BatchNorm1d, \"y = \\frac{x - \\mathrm{E}[x]}"
                 "{\\sqrt{\\mathrm{Var}[x] + \\epsilon}} * \\gamma + \\beta\")",
    ),
    Bug(
        name="sync_batchnorm_eps_outside_sqrt",
        area="ddp",
        file="sync_batchnorm.py",
        search="            invstd = torch.rsqrt(var + eps)",
        replace="            invstd = 1.0 / (var.sqrt() + eps)",
        select="batchnorm_sync-cpu2-ddp-fp32",
        affects="batchnorm_sync and cpu2",
        imitates="a hand-written normalisation dividing by std + eps where BatchNorm divides by "
                 "sqrt(var + eps) (documented: PyTorch BatchNorm1d, \"y = \\frac{x - \\mathrm{E}[x]}"
                 "{\\sqrt{\\mathrm{Var}[x] + \\epsilon}} * \\gamma + \\beta\")",
    ),
    Bug(
        name="sync_batchnorm_max_var_eps",
        area="ddp",
        file="sync_batchnorm.py",
        search="            invstd = torch.rsqrt(var + eps)",
        replace="            invstd = torch.rsqrt(var.clamp(min=eps))",
        select="batchnorm_sync-cpu2-ddp-fp32",
        affects="batchnorm_sync and cpu2",
        imitates="the normalisation by sqrt(max(var, eps)) where BatchNorm uses sqrt(var + eps), as a "
                 "widely used synchronised BatchNorm for PyTorch did "
                 "(vacancy/Synchronized-BatchNorm-PyTorch#43: uses sqrt(max(var, eps)) instead of "
                 "sqrt(var + eps))",
    ),
    Bug(
        name="sync_batchnorm_backward_eps_dropped",
        area="ddp",
        file="sync_batchnorm.py",
        search="        ctx.save_for_backward(x_hat, invstd, w32)",
        replace="        ctx.save_for_backward(x_hat, torch.rsqrt(var), w32)"
                "  # the backward's 1/std, eps left out",
        select="batchnorm_sync-cpu2-ddp-fp32",
        affects="batchnorm_sync and cpu2",
        imitates="the hand-written backward scales the input's gradient by 1/sqrt(var) where the forward "
                 "normalised by 1/sqrt(var + eps) (chainer/chainer#4191: \"+ self.eps is missing in a line "
                 "in backward of BatchRenormalizationFunction\")",
    ),
    Bug(
        name="batchnorm_eval_eps_dropped",
        area="ddp",
        file="sync_batchnorm.py",
        search="                self.weight, self.bias, use_batch_stats, factor, self.eps)",
        replace="                self.weight, self.bias, use_batch_stats, factor,"
                " self.eps if self.training else 0.0)",
        select="batchnorm_sync-cpu2-ddp-fp32",
        # The synchronised layers replace BatchNorm on several processes only (strategies/ddp.py).
        affects="batchnorm_sync and cpu2",
        imitates="the evaluation-mode normalisation with the running statistics divides by "
                 "sqrt(running_var) without eps (chainer/chainer#2214: add eps to the variance in "
                 "fixed_batch_normalization)",
    ),
    Bug(
        name="sync_batchnorm_input_grad_without_weight",
        area="ddp",
        file="sync_batchnorm.py",
        search="                scale = invstd if w32 is None else invstd * w32",
        replace="                scale = invstd  # the layer's weight left out of the input's gradient",
        select="batchnorm_sync-cpu2-ddp-fp32",
        affects="batchnorm_sync and cpu2",
        imitates="the backward multiplies the output's gradient by the layer's weight for the weight and "
                 "bias gradients but not for the input's (denizyuret/Knet.jl#288: Batchnorm backward on cpu "
                 "doesn't seem to take care about scales)",
    ),
    Bug(
        name="sync_batchnorm_running_var_local_count",
        area="ddp",
        file="sync_batchnorm.py",
        search="        unbiased = var * (count / (count - 1))",
        replace="        unbiased = var * (local_count / (local_count - 1))",
        select="batchnorm_sync-cpu2-ddp-fp32",
        affects="batchnorm_sync and cpu2",
        imitates="the running variance's unbiased correction n / (n - 1) taken with this process's count "
                 "instead of the global batch's, so the running statistics (what eval normalises with) are "
                 "too large by (n_local / (n_local - 1)) / (n / (n - 1)) "
                 "(pytorch/pytorch#22192: Sync Batchnorm running var update issue, the count passed is "
                 "the local input's)",
    ),
    Bug(
        name="sync_batchnorm_variance_of_local_means",
        area="ddp",
        file="sync_batchnorm.py",
        search=("            centered = x32 - mean.view(shape)\n"
                "            squares = (centered * centered).sum(dims)\n"),
        replace=("            centered = x32 - mean.view(shape)\n"
                 "            local = x32 - x32.mean(dims).view(shape)  # this process's own mean\n"
                 "            squares = (local * local).sum(dims)\n"),
        select="batchnorm_sync-cpu2-ddp-fp32",
        affects="batchnorm_sync and cpu2",
        imitates="the global variance taken as the processes' within-rank variances pooled, each around its "
                 "own local mean, which leaves out the spread between the ranks' means: normalisation and "
                 "running variance too small "
                 "(leggedrobotics/rsl_rl#226: local variances cannot be summed directly, that omits the "
                 "variance caused by different local means)",
    ),
    Bug(
        name="zero_state_dict_from_half_params",
        area="zero",
        file="strategies/deepspeed/state.py",
        search="            full = safe_get_full_fp32_param(tensor)\n",
        replace="            full = None  # the gathered 16-bit module parameter, not the fp32 master\n",
        select="lm-cpu2-zero2-fp16",
        affects="cpu2-zero and (bf16 or fp16)",
        imitates="ZeRO's consolidated weights gathered from the engine's 16-bit module parameters and "
                 "upcast, not from the fp32 master partitions, as save_16bit_model saves them "
                 "(documented: DeepSpeed's zero_to_fp32.py, \"This script extracts fp32 consolidated "
                 "weights from a zero 1, 2 and 3 DeepSpeed checkpoints\")",
    ),
)
