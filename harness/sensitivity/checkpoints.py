"""Catalog entries for checkpoints: save_state / load_state, exposed by the resume cells (a run
saved by one backend, or by the plain-PyTorch reference, finished by another; docs/resume.md).

Kept apart because the core's checkpoint code was being rewritten while these were written
(accelerate_core/checkpoint/, strategies/*_checkpoint.py): when a patch's search text no longer
occurs there, `python -m harness sensitivity` reports a catalog error for it (and
tests/harness/sensitivity fails), never a catch. Rewrite the entry against the new code then.
"""

from __future__ import annotations

from harness.sensitivity.bug import Bug

# Resuming from the reference's checkpoint (no source launch): the cheapest resume cells.
_SINGLE = "classifier-golden-fp32:cpu1-single-fp32"
_ZERO2 = "classifier-golden-fp32:cpu2-zero2-fp32"

CHECKPOINT_BUGS: tuple[Bug, ...] = (
    Bug(
        name="resume_scheduler_not_restored",
        area="checkpoint",
        file="strategies/torch_checkpoint.py",
        search=("    for i, scheduler in enumerate(schedulers):\n"
                "        scheduler.load_state_dict(reader.scheduler(i))\n"
                "    scaler = scaler_from_neutral"),
        replace="    scaler = scaler_from_neutral",
        select=_SINGLE,
        imitates="the lr scheduler left out of save_state/load_state (accelerate issues on resumed runs "
                 "restarting their warm-up): the schedule starts over after a resume "
                 "(huggingface/accelerate#1563: the LR state silently skipped by load_state, the LR cycle "
                 "restarted)",
    ),
    Bug(
        name="resume_optimizer_state_dropped",
        area="checkpoint",
        file="strategies/torch_checkpoint.py",
        search='        import_torch(optimizer, models, reader.optimizer(i), f"optimizer {i}")',
        replace="        pass  # the optimizer's state is not restored",
        select=_SINGLE,
        imitates="resuming with fresh optimizer moments (load_optimizer_states=False, or an optimizer "
                 "rebuilt after load): AdamW restarts its bias correction "
                 "(KempnerInstitute/KempnerForge#115: AdamW moments silently reset at every resume)",
    ),
    Bug(
        name="zero_resume_moments_left_zero",
        area="checkpoint",
        file="strategies/deepspeed/checkpoint.py",
        search=("    for name in names:\n        param = params[name]\n        for key in per_param:\n"
                "            _set_full(param, saved.tensors[name][key], key)"),
        replace="    pass  # per-parameter optimizer state never scattered into the partitions",
        select=_ZERO2,
        imitates="ZeRO optimizer partitions not refilled on load (DeepSpeed issues on optimizer states lost "
                 "when loading a checkpoint at another world size or from another format) "
                 "(deepspeedai/DeepSpeed#5105: optimizer states improperly restored from an elastic "
                 "checkpoint)",
    ),
    Bug(
        name="resume_data_position_lost",
        area="checkpoint",
        file="data.py",
        search="        self.skip = loader.resume_skip if skip is None else skip",
        replace="        self.skip = 0 if skip is None else skip",
        select=_SINGLE,
        imitates="skip_first_batches not applied after load_state: a run resumed mid-epoch trains on the "
                 "epoch's first batches again (accelerate issues on resuming mid-epoch) "
                 "(huggingface/accelerate#2016: the resumed dataloader yields another sequence of batches)",
    ),
    Bug(
        name="resume_random_streams_one_draw_off",
        area="checkpoint",
        file="data.py",
        search="        streams = _RandomStreams(self.base.generator) if self._restored_pass else None",
        replace=("        streams = (_RandomStreams(self.base.generator)\n"
                 "                   if self._restored_order is not None else None)"),
        select="dropout-cpu1-single-fp32:cpu1-single-fp32",
        # The resume cells of a task that draws random numbers in training (dropout masks).
        affects="resume and dropout",
        imitates="the random streams restored before the resumed DataLoader's iterator draws its base seed "
                 "from the global stream, so every random number after the resume (dropout masks) is one "
                 "draw off the uninterrupted run; this core had it for loaders in order until the resume "
                 "grid gained a dropout task (NVIDIA-NeMo/Megatron-Bridge#5257: checkpoint RNG restore not "
                 "closed over data-iterator creation, resumed runs drift by one random64 draw)",
    ),
    Bug(
        name="resume_optimizer_moments_saved_bf16",
        area="checkpoint",
        file="checkpoint/optimizer_state.py",
        search="                if tensor.is_floating_point() and tensor.shape == param.shape:\n"
               "                    tensor = tensor.float()",
        replace="                if tensor.is_floating_point() and tensor.shape == param.shape:\n"
                "                    tensor = tensor.to(torch.bfloat16)  # half the optimizer file",
        select="classifier-cpu1-single-fp32:cpu1-single-fp32",
        affects="resume and (cpu1-single-fp32: or cpu2-ddp-fp32: or cpu1-single-bf16: or cpu2-ddp-bf16: "
                "or cpu1-single-fp16: or cpu2-ddp-fp16:)",
        imitates="optimizer moments written in bf16 to shrink the checkpoint: torch's load_state_dict casts "
                 "them back to the parameters' fp32, so the resume loads silently, with moments rounded to "
                 "bf16 (TensorAuto/OpenTau#184: resume silently casts bf16 Adam state to fp32, lossy)",
    ),
    Bug(
        name="resume_epoch_boundary_pass_left_empty",
        area="checkpoint",
        file="data.py",
        search="        if finished:\n            skip = 0\n",
        replace="        if finished:\n"
                "            skip = len(self)  # the whole pass, as if the epoch were still to finish\n",
        select="uneven_drop-cpu1-single-fp32:cpu1-single-fp32",
        # uneven_drop's checkpoint is the one at an epoch's last batch (matrix.toml [resume.steps]).
        affects="resume and uneven_drop",
        imitates="a checkpoint taken at an epoch's last batch restored as a pass with every batch still to "
                 "skip, so the loop's next epoch iterates an exhausted loader and trains on nothing "
                 "(verl-project/verl#7401: resuming from an epoch-boundary checkpoint silently skips the "
                 "next epoch)",
    ),
    Bug(
        name="resume_custom_sampler_redrawn",
        area="checkpoint",
        file="data.py",
        search="        drawn = self.shuffled or self.custom\n",
        replace="        drawn = self.shuffled\n",
        select="weighted-cpu1-single-fp32:cpu1-single-fp32",
        affects="resume and weighted",
        imitates="a checkpoint that keeps a shuffling loader's order and generator but not a custom "
                 "sampler's: the resumed epoch is redrawn from the destination's fresh sampler, so the rest "
                 "of that epoch and every later one train on other samples than the uninterrupted run "
                 "(pytorch/pytorch#36650: samplers have no state_dict, so training cannot continue at the "
                 "precise batch after a restart)",
    ),
    Bug(
        name="resume_weights_saved_fp16",
        area="checkpoint",
        file="checkpoint/writer.py",
        search="        full = {k: (v.float() if v.is_floating_point() else v) for k, v in state.items()}",
        replace="        full = {k: (v.half() if v.is_floating_point() else v) for k, v in state.items()}",
        select="classifier-cpu1-single-fp32:cpu1-single-fp32",
        # Every resume pair whose checkpoint the core wrote (the reference writes the golden ones).
        affects="resume and not golden",
        imitates="the model written as 16-bit weights (DeepSpeed's save_16bit_model, a half "
                 "model.safetensors) and loaded back into fp32 parameters: the resumed run continues from "
                 "weights rounded to fp16 (documented: DeepSpeed config JSON, "
                 "stage3_gather_16bit_weights_on_model_save \"Consolidate the weights before saving "
                 "the model by save_16bit_model()\")",
    ),
)
