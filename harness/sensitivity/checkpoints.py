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
)
