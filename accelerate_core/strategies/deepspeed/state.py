"""Full state out of a DeepSpeed engine: the consolidated fp32 state dict and checkpoints.

Checkpoints are the backend-neutral format (docs/checkpoint-format.md); the conversion to and
from DeepSpeed's partitions is in deepspeed_checkpoint.py, through DeepSpeed's public
per-parameter API.

Gathering a partitioned model is a collective: every rank must take part. Called on the main
process only (a common mistake: `if accelerator.is_main_process: get_state_dict(model)`), it
would hang forever inside DeepSpeed. So a monitored barrier on a private gloo group (which works
beside NCCL too, and cannot be confused with the user's own collectives on the default group)
runs first, with a timeout; a rank that does not arrive turns into CollectiveMisuseError.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from accelerate_core.errors import CollectiveMisuseError, explain


def new_monitor_group() -> Any:
    """A gloo group over all ranks for the arrival checks of one engine. A collective: the
    strategy creates it in setup (every rank prepares together) and destroys it at teardown, so
    that a misuse, which leaves this group's connections broken, stays with that Accelerator."""
    return dist.new_group(backend="gloo")


def destroy_monitor_group(group: Any) -> None:
    if group is not None and dist.is_initialized():
        dist.destroy_process_group(group)


def check_every_rank_arrives(what: str, group: Any, timeout_s: float) -> None:
    """Raise CollectiveMisuseError on the ranks that wait in vain for the others."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    try:
        dist.monitored_barrier(group=group, timeout=timedelta(seconds=timeout_s), wait_all_ranks=True)
    except RuntimeError as exc:
        raise CollectiveMisuseError(
            explain(
                f"{what} on rank {dist.get_rank()}",
                f"it is a collective under DeepSpeed (the partitions of every rank are gathered), and "
                f"not every rank called it within {timeout_s:g} s ({str(exc).splitlines()[0]})",
                "calling it on every rank at the same point of the program (after this error, this "
                "Accelerator's collectives are unusable: end the run or free_memory() on every rank)",
                f"call {what} outside `if accelerator.is_main_process:`"
                + (" and only save the result on the main process, e.g. `sd = "
                   "accelerator.get_state_dict(model)` then `accelerator.save(sd, path)`"
                   if "get_state_dict" in what else " (every rank writes its own part)"),
            )
        ) from exc


def consolidated_state_dict(engine: Any) -> dict[str, torch.Tensor]:
    """Every key of the user's module with its full shape, fp32 master values, on CPU.

    Every rank gets the full dict (the fp32 gather is an all-reduce in DeepSpeed). Parameters
    come from the optimizer's fp32 master copy when there is one (bf16/fp16 engines keep the
    module itself in half precision), otherwise from the gathered module parameter.
    """
    from deepspeed.runtime.zero.partition_parameters import GatheredParameters
    from deepspeed.utils import safe_get_full_fp32_param

    module: nn.Module = engine.module
    out: dict[str, torch.Tensor] = {}
    done: dict[int, str] = {}  # id(parameter) -> first key, so tied weights stay tied
    for name, tensor in module.state_dict(keep_vars=True).items():
        if id(tensor) in done:
            out[name] = out[done[id(tensor)]]
            continue
        if isinstance(tensor, nn.Parameter):
            full = safe_get_full_fp32_param(tensor)
            if full is None:  # no master copy (fp32 without ZeRO partitions): the module holds it
                with GatheredParameters([tensor]):
                    full = tensor.detach().clone()
            out[name] = full.detach().to("cpu", torch.float32)
        else:  # buffers are not partitioned
            value = tensor.detach().to("cpu")
            out[name] = value.float() if value.is_floating_point() else value
        done[id(tensor)] = name
    return out
