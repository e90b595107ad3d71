"""Full state of FSDP2-sharded models and their optimizers, through the public
torch.distributed.checkpoint.state_dict API, and its conversion to the neutral checkpoint
(docs/checkpoint-format.md): full fp32 weights, optimizer state by parameter NAME.

FSDP2 does not wrap the module, so the parameter names (FQNs) the API uses are the user's own
module's, the names every other backend writes: a checkpoint moves between fsdp, ddp, single and
ZeRO in both directions. Also here: pointing an optimizer built before prepare() at the sharded
parameters, which fully_shard created as new objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor, distribute_tensor

from accelerate_core.checkpoint.layout import CheckpointError, like, to_json_value
from accelerate_core.checkpoint.optimizer_state import (
    NeutralOptimizer,
    check_groups,
    check_state_present,
    class_name,
    hyperparameters,
    owning_model,
)
from accelerate_core.errors import explain

# Full tensors; only rank 0 gets them (the others an empty dict), on CPU: what the writer needs.
TO_RANK0_CPU = StateDictOptions(full_state_dict=True, cpu_offload=True)
# Full tensors on every rank, where they were gathered (moved to CPU by the caller).
TO_EVERY_RANK = StateDictOptions(full_state_dict=True)


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full state dict on every rank as plain CPU tensors (a collective), as DDP and
    DeepSpeed give it: a script may save it from any rank."""
    state = cast(dict[str, torch.Tensor], get_model_state_dict(model, options=TO_EVERY_RANK))
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


def swap_optimizer_params(optimizer: torch.optim.Optimizer, replaced: Mapping[int, nn.Parameter]) -> None:
    """Point `optimizer` at the sharded parameters that replaced the ones it was built over
    (`replaced`: id(old parameter) -> its sharded successor), as Accelerate does for FSDP2.

    State it already holds (it stepped before prepare) is sharded like its parameter, so the
    run continues where it was; parameters of no prepared model are left as they are.
    """
    for group in optimizer.param_groups:
        new_params = []
        for old in group["params"]:
            new = replaced.get(id(old), old)
            if new is not old and old in optimizer.state:
                optimizer.state[new] = {key: _shard_like(value, new)
                                        for key, value in optimizer.state.pop(old).items()}
            new_params.append(new)
        group["params"] = new_params


def _shard_like(value: Any, param: nn.Parameter) -> Any:
    if isinstance(param, DTensor) and isinstance(value, torch.Tensor) and not isinstance(value, DTensor) \
            and value.shape == param.shape:
        return distribute_tensor(value.detach().to(param.to_local().device), param.device_mesh,
                                 param.placements)
    return value


def save_model(model: nn.Module) -> dict[str, torch.Tensor]:
    """Full state on rank 0 (empty elsewhere): a collective."""
    return cast(dict[str, torch.Tensor], get_model_state_dict(model, options=TO_RANK0_CPU))


def export_optimizer(model_index: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                     where: str) -> NeutralOptimizer | None:
    """The optimizer's full state in the neutral form on rank 0, None elsewhere (a collective)."""
    full = cast(dict[str, Any], get_optimizer_state_dict(model, optimizer, options=TO_RANK0_CPU))
    if not full:
        return None
    shapes = {name: p.shape for name, p in model.named_parameters()}
    groups = [{**hyperparameters(g, f"{where}.param_groups[{i}]"), "params": list(g["params"])}
              for i, g in enumerate(full["param_groups"])]
    neutral = NeutralOptimizer(class_name(optimizer), model_index, groups)
    for name, state in full["state"].items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                tensor = value.detach().to("cpu")
                if tensor.is_floating_point() and tensor.shape == shapes.get(name):
                    tensor = tensor.float()
                neutral.tensors.setdefault(name, {})[key] = tensor
            else:
                neutral.scalars.setdefault(name, {})[key] = to_json_value(
                    value, f"{where}.state[{name!r}][{key!r}]")
    return neutral


def load_model(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Every rank passes the full state it read; each keeps its shard (a collective)."""
    set_model_state_dict(model, cast(dict[str, Any], state), options=TO_EVERY_RANK)


def import_optimizer(models: Sequence[nn.Module], optimizer: torch.optim.Optimizer, saved: NeutralOptimizer,
                     where: str) -> None:
    """Load the neutral state (full tensors, on every rank) into an optimizer over sharded
    parameters, after the same checks the plain-torch import makes (a collective)."""
    index, names = owning_model([g["params"] for g in optimizer.param_groups], models)
    if index != saved.model_index:
        raise CheckpointError(
            explain(f"load_state: {where} holds state of model {saved.model_index}'s parameters",
                    f"the prepared optimizer holds model {index}'s",
                    "models and optimizers prepared in the order of the run that saved them",
                    "pass them to prepare() in that order")
        )
    live = [[names[id(p)] for p in g["params"]] for g in optimizer.param_groups]
    check_groups(saved, live, where)
    check_state_present(saved, [n for g in live for n in g], where)
    groups = []
    for live_group, names_of_group, saved_group in zip(optimizer.param_groups, live, saved.param_groups,
                                                       strict=True):
        values = {k: like(live_group.get(k), v) for k, v in saved_group.items() if k != "params"}
        groups.append((live_group, values, names_of_group))
    if not saved.names_with_state():
        # Saved before any step: only the hyperparameters (learning rates) come back.
        for live_group, values, _ in groups:
            live_group.update(values)
        return
    full: dict[str, Any] = {
        "state": {name: saved.state_of(name) for g in live for name in g if name in saved.names_with_state()},
        "param_groups": [{**values, "params": names_of_group} for _, values, names_of_group in groups],
    }
    set_optimizer_state_dict(models[index], optimizer, full, options=TO_EVERY_RANK)
