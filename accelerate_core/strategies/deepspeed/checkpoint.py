"""DeepSpeed ZeRO 1/2/3 <-> the backend-neutral checkpoint (docs/checkpoint-format.md).

Values go through DeepSpeed's public per-parameter API (`deepspeed.utils.safe_get_full_*` /
`safe_set_full_*`), which gathers a parameter's full fp32 value or optimizer state from, or
scatters it into, whatever partitions the running engine has: so a checkpoint written at one
world size or stage loads at any other. Every function here is a collective (ZeRO-3 gathers).

Two things that API does not cover, and how they are handled:
- optimizer state must exist before it can be set. A fresh engine has none (torch optimizers
  create it at their first step), so it is created here, in the torch optimizer that DeepSpeed
  steps over its flat fp32 partitions, with the checkpoint's keys; ZeRO-1/2 then link it to each
  parameter's fragment (what they do lazily at their first step).
- scalar state (`step`) is one value per flat partition, not per parameter: it is read from
  the torch optimizer's state and written back to every partition.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from accelerate_core.checkpoint.layout import CheckpointError, like, to_json_value
from accelerate_core.checkpoint.optimizer_state import (
    NeutralOptimizer,
    check_groups,
    check_state_present,
    class_name,
    hyperparameters,
    names_by_parameter,
)
from accelerate_core.errors import explain


def group_names(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> list[list[str]]:
    """Each param group's parameter names, read from the user's optimizer BEFORE
    deepspeed.initialize (which replaces the groups' parameters with flat partitions). Without a
    client optimizer DeepSpeed builds one group of every trainable parameter."""
    names = names_by_parameter([model])[0]
    if optimizer is None:
        return [[n for n, p in model.named_parameters() if p.requires_grad]]
    return [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]


def full_shapes(module: nn.Module) -> dict[str, torch.Size]:
    """Every state_dict key with its full shape (ZeRO-3 keeps it in `ds_shape`)."""
    return {k: getattr(t, "ds_shape", t.shape) for k, t in module.state_dict(keep_vars=True).items()}


def _torch_optimizer(engine: Any) -> Any:
    return getattr(engine.optimizer, "optimizer", engine.optimizer)


def _flat_partitions(engine: Any) -> list[torch.Tensor]:
    """The tensors the torch optimizer keeps state for: this rank's flat fp32 partitions."""
    inner = engine.optimizer
    for attribute in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat"):  # ZeRO 1/2, 3
        if hasattr(inner, attribute):
            return list(getattr(inner, attribute))
    return [p for group in _torch_optimizer(engine).param_groups for p in group["params"]]


def _link_state_fragments(engine: Any) -> None:
    """ZeRO-1/2 give each parameter a view of its optimizer state (what safe_*_optimizer_state
    read and write) lazily, ONCE, right after the first param group's first step (DeepSpeed 0.19,
    stage_1_and_2._optimizer_step): the parameters of later groups, whose state did not exist
    yet, are never linked and the safe_* calls fail for them ("exp_avg not found in optimizer
    state fragment"). Link again now that every group's state exists. No-op for ZeRO-3."""
    inner = engine.optimizer
    if hasattr(inner, "_lazy_init_hp_params_optimizer_state") and hasattr(
        inner, "_hp_optimizer_states_linked"
    ):
        inner._hp_optimizer_states_linked = False
        inner._lazy_init_hp_params_optimizer_state()


def export_optimizer(engine: Any, groups: list[list[str]], where: str) -> NeutralOptimizer:
    from deepspeed.utils import safe_get_full_optimizer_state

    basic = _torch_optimizer(engine)
    params = dict(engine.module.named_parameters())
    hyper = [
        {**hyperparameters(g, f"{where}.param_groups[{i}]"), "params": list(names)}
        for i, (g, names) in enumerate(zip(basic.param_groups, groups, strict=True))
    ]
    neutral = NeutralOptimizer(class_name(basic), 0, hyper)
    flat_states = [basic.state[p] for p in _flat_partitions(engine) if p in basic.state]
    if not flat_states:
        return neutral  # never stepped
    per_param = sorted(k for k, v in flat_states[0].items() if torch.is_tensor(v) and v.dim() > 0)
    shared = _shared_scalars(flat_states, per_param, where)
    _link_state_fragments(engine)
    for name in (n for g in groups for n in g):
        param = params[name]
        entry = {
            key: safe_get_full_optimizer_state(param, key)
            .detach()
            .to("cpu", torch.float32)
            .reshape(getattr(param, "ds_shape", param.shape))
            for key in per_param
        }
        for key, value in shared.items():
            if torch.is_tensor(value):
                entry[key] = value.detach().to("cpu").clone()
            else:
                neutral.scalars.setdefault(name, {})[key] = to_json_value(value, f"{where}.state[{key!r}]")
        neutral.tensors[name] = entry
    return neutral


def _same(a: Any, b: Any) -> bool:
    if torch.is_tensor(a) and torch.is_tensor(b):
        return a.shape == b.shape and bool(torch.equal(a.cpu(), b.cpu()))
    return bool(a == b)


def _shared_scalars(states: list[dict[str, Any]], per_param: list[str], where: str) -> dict[str, Any]:
    keys = [k for k in states[0] if k not in per_param]
    out: dict[str, Any] = {}
    for key in keys:
        values = [s[key] for s in states]
        first = values[0]
        same = all(_same(v, first) for v in values)
        if not same:
            raise CheckpointError(
                explain(
                    f"save_state: {where} under DeepSpeed",
                    f"its per-partition state {key!r} differs between param groups "
                    f"({values[:4]}), so it cannot be given per parameter",
                    "optimizer state that is either per element or the same for all",
                    "report this optimizer; save with another strategy",
                )
            )
        out[key] = first
    return out


def import_model(engine: Any, state: dict[str, torch.Tensor]) -> None:
    """Full tensors into the engine: the fp32 master partitions (safe_set_full_fp32_param) AND
    the module's own (bit16, or ZeRO-3 partitioned) parameters, which the forward uses."""
    from deepspeed.runtime.zero.partition_parameters import GatheredParameters

    module: nn.Module = engine.module
    done: set[int] = set()
    for name, tensor in module.state_dict(keep_vars=True).items():
        if id(tensor) in done:
            continue
        done.add(id(tensor))
        value = state[name]
        if isinstance(tensor, nn.Parameter):
            _set_full(tensor, value, None)
            # ZeRO-3: gathered, written on every rank, re-partitioned from rank 0 on exit; a no-op
            # context for ZeRO-1/2, whose module parameters are whole on every rank.
            with GatheredParameters([tensor], modifier_rank=0), torch.no_grad():
                tensor.data.copy_(value.to(tensor.device, tensor.dtype).reshape(tensor.data.shape))
        else:
            with torch.no_grad():
                tensor.copy_(value.to(tensor.device, tensor.dtype))


def _set_full(param: nn.Parameter, value: torch.Tensor, key: str | None) -> None:
    """Set a parameter's full fp32 value (key None) or optimizer state `key` from the full tensor.

    ZeRO-3 goes through the local API with this rank's slice of the flattened value padded to
    world x partition size, which is how ZeRO-3 partitions (`param.partition_numel()`):
    DeepSpeed 0.19's safe_set_full_* reads past the end of the value for a parameter whose last
    partition is padding (e.g. 1 element on 2 ranks)."""
    from deepspeed.utils import (
        safe_set_full_fp32_param,
        safe_set_full_optimizer_state,
        safe_set_local_fp32_param,
        safe_set_local_optimizer_state,
    )

    value = value.detach().to(torch.float32)
    if not hasattr(param, "ds_id"):  # ZeRO-1/2
        target = value.to(param.device)
        if key is None:
            safe_set_full_fp32_param(param, target)
        else:
            safe_set_full_optimizer_state(param, target, key)
        return
    import torch.distributed as dist

    size = int(param.partition_numel())  # type: ignore[attr-defined]
    group = getattr(param, "ds_process_group", None)
    rank, world = dist.get_rank(group=group), dist.get_world_size(group=group)
    flat = value.flatten()
    padded = torch.cat([flat, flat.new_zeros(size * world - flat.numel())])
    local = padded[rank * size : (rank + 1) * size].to(param.ds_tensor.device)  # type: ignore[attr-defined]
    if key is None:
        safe_set_local_fp32_param(param, local)
    else:
        safe_set_local_optimizer_state(param, local, key)


def import_optimizer(engine: Any, groups: list[list[str]], saved: NeutralOptimizer, where: str) -> None:
    check_groups(saved, groups, where)
    check_state_present(saved, [n for g in groups for n in g], where)
    basic = _torch_optimizer(engine)
    for live, saved_group in zip(basic.param_groups, saved.param_groups, strict=True):
        for key, value in saved_group.items():
            if key != "params":
                live[key] = like(live.get(key), value)
    names = [n for g in groups for n in g]
    if not saved.names_with_state():
        return
    params = dict(engine.module.named_parameters())
    first = next(n for n in names if n in saved.names_with_state())
    sample = saved.state_of(first)
    shape = tuple(getattr(params[first], "ds_shape", params[first].shape))
    per_param = sorted(
        k for k, v in sample.items() if torch.is_tensor(v) and tuple(v.shape) == shape and v.dim() > 0
    )
    shared = {k: _one_value(saved, names, k, where) for k in sample if k not in per_param}
    for flat in _flat_partitions(engine):
        entry = basic.state[flat]
        for key in per_param:
            if key not in entry:
                entry[key] = torch.zeros_like(flat)
        for key, value in shared.items():
            entry[key] = value.clone() if torch.is_tensor(value) else value
    _link_state_fragments(engine)  # ZeRO-1/2: point each parameter at the state just created
    for name in names:
        param = params[name]
        for key in per_param:
            _set_full(param, saved.tensors[name][key], key)


def _one_value(saved: NeutralOptimizer, names: list[str], key: str, where: str) -> Any:
    values = [saved.state_of(n)[key] for n in names if key in saved.state_of(n)]
    first = values[0]
    if not all(_same(v, first) for v in values):
        raise CheckpointError(
            explain(
                f"load_state: {where} into DeepSpeed",
                f"its per-parameter {key!r} differs between parameters, and DeepSpeed "
                "keeps one value for all the parameters of a partition",
                "a checkpoint whose parameters all stepped together",
                "resume it with the single or ddp strategy",
            )
        )
    return first


def loss_scaler_state(engine: Any) -> dict[str, Any] | None:
    """DeepSpeed's dynamic fp16 loss scaler in GradScaler's terms (precision.json)."""
    scaler = getattr(engine.optimizer, "loss_scaler", None)
    if scaler is None or not getattr(scaler, "dynamic", False):
        return None
    window = int(scaler.scale_window)
    stable = max(int(scaler.cur_iter) - int(scaler.last_overflow_iter) - 1, 0)
    return {
        "scale": float(scaler.cur_scale),
        "growth_tracker": stable % window,
        "growth_factor": float(scaler.scale_factor),
        "backoff_factor": 1.0 / float(scaler.scale_factor),
        "growth_interval": window,
    }


def load_loss_scaler(engine: Any, neutral: dict[str, Any] | None) -> None:
    scaler = getattr(engine.optimizer, "loss_scaler", None)
    if neutral is None or scaler is None or not getattr(scaler, "dynamic", False):
        return
    scaler.cur_scale = float(neutral["scale"])
    scaler.last_overflow_iter = int(scaler.cur_iter) - 1 - int(neutral.get("growth_tracker", 0))
