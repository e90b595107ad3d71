"""Evidence that FSDP2 (torch's `fully_shard`) ran, read from the model that trained and the
strategy that sharded it, never from what was asked for (a tool judges it against its request:
the harness's is harness/judge/fsdp_evidence_check.py):

- the units: how many modules of the model are FSDP modules (fully_shard turned them into
  `FSDPModule` subclasses), and what the strategy says it wrapped / left unsharded;
- the parameters: how many are DTensors sharded (a `Shard` placement) over which mesh size, and
  this rank's elements against the full ones (a sharded rank holds about 1/N of them);
- the dtypes FSDP2 resolved from the MixedPrecisionPolicy each unit was given: the dtype the
  all-gathered parameters are cast to for compute (`param_dtype`, the original dtype when the
  policy leaves it None), the dtype gradients are reduce-scattered in (`reduce_dtype`, the compute
  dtype when None), and the root's `output_dtype`. BatchNorm units are read apart
  (`batchnorm_param_dtype`, present only when the model has BatchNorm units): under a half
  policy the core keeps them in fp32 (docs/fsdp.md), which must show, not blur the rest.

FSDP2's per-unit state (`_get_fsdp_state`, its param groups and `FSDPParam`s) is not public API:
where it cannot be read the field is absent, and a judge must treat that as missing evidence
rather than guess (the harness's fails the cell).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn


def fsdp_evidence(strategy: Any, model: nn.Module) -> dict[str, Any] | None:
    """What FSDP2 did to `model`; None when nothing in it was touched by fully_shard and the
    strategy is not an FSDP one (a plain, DDP or DeepSpeed run has no FSDP evidence)."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor, Shard

    units = [module for module in model.modules() if isinstance(module, FSDPModule)]
    params = list(model.named_parameters())
    dtensors = [(name, p) for name, p in params if isinstance(p, DTensor)]
    if not units and not dtensors and not hasattr(strategy, "sharding"):
        return None
    sharded = [(name, p) for name, p in dtensors if any(isinstance(pl, Shard) for pl in p.placements)]
    evidence: dict[str, Any] = {
        "units": len(units),
        "parameters": len(params),
        "sharded_parameters": len(sharded),
        # Read from the model: every parameter that is not a DTensor stayed whole on every rank.
        "plain_parameters": [name for name, p in params if not isinstance(p, DTensor)],
        "mesh_sizes": sorted({int(p.device_mesh.size()) for _, p in dtensors}),
        "placements": sorted({", ".join(str(pl) for pl in p.placements) for _, p in dtensors}),
        "full_elements": sum(int(p.numel()) for _, p in params),
        "local_elements": sum(int(p.to_local().numel()) if isinstance(p, DTensor) else int(p.numel())
                              for _, p in params),
        "trainable_elements": sum(int(p.numel()) for _, p in params if p.requires_grad),
    }
    # What the strategy reports it did (strategies/fsdp/strategy.py): recorded beside what the
    # model shows, so a strategy that claims units the model does not have is seen as that.
    for key in ("wrapped_modules", "unsharded_parameters"):
        value = getattr(strategy, key, None)
        if value is not None:
            evidence[key] = [list(v) if isinstance(v, tuple) else v for v in value]
    evidence.update(_resolved_dtypes(units))
    return evidence


def _resolved_dtypes(units: Sequence[nn.Module]) -> dict[str, Any]:
    """The compute, reduce and root output dtypes FSDP2 resolved for the units' parameters (sets
    joined by '+', so one unit cast differently shows)."""
    from torch.nn.modules.batchnorm import _BatchNorm

    param_dtypes: set[str] = set()
    batchnorm_dtypes: set[str] = set()
    reduce_dtypes: set[str] = set()
    output_dtypes: set[str] = set()
    try:
        for unit in units:
            computes = batchnorm_dtypes if isinstance(unit, _BatchNorm) else param_dtypes
            state = unit._get_fsdp_state()  # type: ignore[operator]
            policy = state._mp_policy
            if state._is_root:  # set at lazy init, i.e. by the first forward
                output_dtypes.add(_name(policy.output_dtype) if policy.output_dtype is not None else "none")
            for group in state._fsdp_param_groups:
                for fsdp_param in group.fsdp_params:
                    compute = fsdp_param.param_dtype or fsdp_param.orig_dtype
                    computes.add(_name(compute))
                    reduce_dtypes.add(_name(fsdp_param.reduce_dtype or compute))
    except (AttributeError, AssertionError, TypeError):
        return {}  # FSDP2's internals moved: the dtype fields stay absent (missing evidence)
    if not param_dtypes and not batchnorm_dtypes:
        return {}
    resolved = {"param_dtype": "+".join(sorted(param_dtypes)) or "none",
                "reduce_dtype": "+".join(sorted(reduce_dtypes)),
                "output_dtype": "+".join(sorted(output_dtypes)) or "unknown"}
    if batchnorm_dtypes:
        resolved["batchnorm_param_dtype"] = "+".join(sorted(batchnorm_dtypes))
    return resolved


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
