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
        name="zero3_memory_efficient_linear_left_on",
        area="deepspeed_config",
        file="strategies/deepspeed/config.py",
        search='    m.default("zero_optimization.memory_efficient_linear", False)\n',
        replace="",
        select="regression-cpu2-zero3-fp32",
        affects="cpu2-zero3",
        imitates="ZeRO-3 left to swap torch.nn.functional.linear for its own matmul-then-add: every linear "
                 "layer rounds once more, well inside any fp32 tolerance, so only the exact tier can see it "
                 "(documented: DeepSpeed ZeRO config, memory_efficient_linear defaults to True, \"Use memory "
                 "efficient linear implementation, for Stage 3.\")",
    ),
    Bug(
        name="clip_coefficient_without_eps",
        area="clipping",
        file="strategies/single_device.py",
        search=("        return torch.nn.utils.clip_grad_norm_(list(parameters), max_norm, "
                "norm_type=norm_type)"),
        replace=("        params = [p for p in parameters if p.grad is not None]\n"
                 "        norms = [torch.linalg.vector_norm(p.grad, norm_type) for p in params]\n"
                 "        norm = torch.linalg.vector_norm(torch.stack(norms), norm_type)\n"
                 "        for p in params:  # max_norm / norm, where torch divides by norm + 1e-6\n"
                 "            p.grad.mul_(torch.clamp(max_norm / norm, max=1.0))\n"
                 "        return norm"),
        select="clip_norm-cpu1-single-fp32",
        affects="clip_norm and (cpu1-single or cpu2-ddp)",
        imitates="gradient clipping written by hand (as frameworks do for their own parameter containers) "
                 "with max_norm / norm as the coefficient, where torch.nn.utils.clip_grad_norm_ divides by "
                 "norm + 1e-6: every clipped step scaled by a few parts in a million (no upstream report "
                 "found; imitates the kind of bug)",
    ),
)
