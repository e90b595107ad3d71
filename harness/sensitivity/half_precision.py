"""Catalog entries that act only in fp16/bf16 runs: a 16-bit copy standing where the fp32 master
copy belongs (the weights the optimizer steps, its state, the initial weights, the state dict
handed out), on the amp path (single, ddp) and on FSDP's. Part of the small-effect entries: one
rounding of the weights to 16 bits is about the size of the noise a correct half-precision run
makes, so these show whether the per-task weight tolerances (docs/calibration.md, section 3) are
tight, and their misses say where they are not (docs/sensitivity.md).

Every one changes numbers only, never the evidence a cell records: a catch is a comparison.
"""

from __future__ import annotations

from harness.sensitivity.bug import Bug


def _round_weights(dtype: str, indent: str) -> str:
    """Lines that round every parameter of `optimizer` to `dtype` in place: no fp32 master copy
    survives."""
    return (f"{indent}with torch.no_grad():\n"
            f"{indent}    for group in optimizer.param_groups:\n"
            f"{indent}        for p in group[\"params\"]:\n"
            f"{indent}            p.copy_(p.to({dtype}))\n")


def _round_state(dtype: str, indent: str) -> str:
    """Lines that round every floating optimizer-state tensor of `optimizer` (momentum, Adam's
    moments) to `dtype` in place, as an optimizer keeping its state in a half dtype does."""
    return (f"{indent}with torch.no_grad():\n"
            f"{indent}    for state in optimizer.state.values():\n"
            f"{indent}        for key, value in state.items():\n"
            f"{indent}            if key != \"step\" and torch.is_tensor(value) \\\n"
            f"{indent}                    and value.is_floating_point():\n"
            f"{indent}                value.copy_(value.to({dtype}))\n")


_AMP_BF16_STEP = ("        if self.scaler is None:\n"
                  "            optimizer.step()\n"
                  "            return False\n")
_AMP_FP16_STEP = "        self.scaler.step(optimizer)\n"
_AMP_REGISTER = "        self._registered.add(id(optimizer))\n"


def _bf16_step(extra: str) -> str:
    return ("        if self.scaler is None:\n            optimizer.step()\n" + extra
            + "            return False\n")


HALF_PRECISION_BUGS: tuple[Bug, ...] = (
    Bug(
        name="bf16_no_fp32_master_weights",
        area="precision_fallback",
        file="precision/amp.py",
        search=_AMP_BF16_STEP,
        replace=_bf16_step(_round_weights("self.dtype", "            ")),
        select="root_param-cpu1-single-bf16",
        affects="bf16 and (cpu1-single or cpu2-ddp)",
        imitates="bf16 weights updated in place with no fp32 master copy, so every step's update is "
                 "rounded to bf16 (NVIDIA/apex#1728: FusedAdam doesn't allocate master weights for "
                 "bfloat16)",
    ),
    Bug(
        name="fp16_no_fp32_master_weights",
        area="loss_scaling",
        file="precision/amp.py",
        search=_AMP_FP16_STEP,
        replace=_AMP_FP16_STEP + _round_weights("self.dtype", "        "),
        select="root_param-cpu1-single-fp16",
        affects="fp16 and (cpu1-single or cpu2-ddp)",
        imitates="fp16 weights updated in place with no fp32 master copy, every step's update rounded "
                 "to fp16 (deepinsight/insightface#1367: the master copy of fp16 training kept in fp32)",
    ),
    Bug(
        name="fp16_optimizer_state_in_fp16",
        area="loss_scaling",
        file="precision/amp.py",
        search=_AMP_FP16_STEP,
        replace=_AMP_FP16_STEP + _round_state("self.dtype", "        "),
        select="lm-cpu1-single-fp16",
        affects="fp16 and (cpu1-single or cpu2-ddp)",
        imitates="the optimizer's momentum and Adam moments kept in fp16 in an fp16 run, where a "
                 "second moment below fp16's range flushes to zero (meta-pytorch/torchtune#2254: the "
                 "remedy the thread proposes for bad 16-bit convergence is fp32 optimizer state)",
    ),
    Bug(
        name="half_initial_weights_rounded",
        area="precision_fallback",
        file="precision/amp.py",
        search=_AMP_REGISTER,
        replace=_AMP_REGISTER + _round_weights("self.dtype", "        "),
        select="sgd_accum-cpu1-single-bf16",
        affects="(bf16 or fp16) and (cpu1-single or cpu2-ddp)",
        imitates="the model's initial fp32 weights rounded to the 16-bit dtype before training: "
                 "initialised in bf16/fp16 under mixed precision, then upcast "
                 "(Lightning-AI/pytorch-lightning#21586: init_module under bf16-mixed or 16-mixed "
                 "initialised the parameters in bf16/fp16, not fp32)",
    ),
    Bug(
        name="half_state_dict_rounded",
        area="state_dict",
        file="strategies/single_device.py",
        search='        return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}',
        replace=('        half = getattr(self.precision, "dtype", None)\n'
                 '        return {k: (v.detach().to(half) if half is not None and v.is_floating_point()\n'
                 '                    else v.detach()).to("cpu", v.dtype, copy=True)\n'
                 '                for k, v in state.items()}'),
        select="root_param-cpu1-single-bf16",
        affects="(bf16 or fp16) and (cpu1-single or cpu2-ddp)",
        imitates="the full state dict handed out as the 16-bit compute copy upcast to fp32, not the fp32 "
                 "master weights (documented: DeepSpeed config JSON, "
                 "stage3_gather_16bit_weights_on_model_save \"Consolidate the weights before saving the "
                 "model by save_16bit_model()\"; zero_to_fp32.py recovers the fp32 ones)",
    ),
    Bug(
        name="fsdp_initial_weights_rounded",
        area="fsdp",
        file="strategies/fsdp/strategy.py",
        search="            model.to(self.root_device)\n",
        replace=("            model.to(self.root_device)\n"
                 "            if self.precision.param_dtype is not None:\n"
                 "                with torch.no_grad():\n"
                 "                    for p in model.parameters():\n"
                 "                        p.copy_(p.to(self.precision.param_dtype))\n"),
        select="root_param-cpu2-fsdp-bf16",
        affects="cpu2-fsdp and (bf16 or fp16)",
        imitates="the model cast to the 16-bit param_dtype before fully_shard and back, so FSDP's fp32 "
                 "master shards start from rounded weights (pytorch/torchtitan#1133: a bf16 model "
                 "sharded and then moved to fp32; documented: fully_shard keeps the sharded parameters "
                 "in the dtype they had)",
    ),
    Bug(
        name="fsdp_no_fp32_master_weights",
        area="fsdp",
        file="precision/fsdp.py",
        search="        if self.scaler is None:\n            optimizer.step()\n            return False\n",
        replace=("        if self.scaler is None:\n            optimizer.step()\n"
                 "            if self.param_dtype is not None:\n"
                 + _round_weights("self.param_dtype", "                ") + "            return False\n"),
        select="root_param-cpu2-fsdp-bf16",
        affects="cpu2-fsdp and bf16",
        imitates="FSDP's sharded parameters kept in bf16 (the module cast to bf16 before fully_shard), "
                 "so the optimizer steps on bf16 shards with no fp32 master copy "
                 "(meta-pytorch/torchtune#2254: very bad convergence with bf16)",
    ),
    Bug(
        name="fsdp_state_dict_from_half_params",
        area="fsdp",
        file="strategies/fsdp/strategy.py",
        search="        return fsdp_state.full_state_dict(model)",
        replace=("        half = self.precision.param_dtype\n"
                 "        return {k: (v.to(half) if half is not None and v.is_floating_point() else v)\n"
                 "                .to(v.dtype)\n"
                 "                for k, v in fsdp_state.full_state_dict(model).items()}"),
        select="sgd_accum-cpu2-fsdp-bf16",
        affects="cpu2-fsdp and (bf16 or fp16)",
        imitates="FSDP's full state dict taken from the unsharded 16-bit parameters of the forward, "
                 "not the fp32 shards (facebookresearch/fairscale#445: with mixed_precision, state_dict "
                 "all-gathers the FP16 params as for a forward)",
    ),
)
