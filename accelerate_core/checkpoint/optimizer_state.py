"""Optimizer state keyed by parameter NAME, the form every backend reads and writes.

A torch optimizer numbers its parameters by position (`state_dict()`); DeepSpeed keeps flat
partitions per rank. Neither survives a change of backend or world size; names do. This module
converts a plain torch optimizer (single device, DDP) to and from the neutral form; DeepSpeed's
conversion lives in strategies/deepspeed/state.py and produces the same dataclass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from accelerate_core.checkpoint.layout import CheckpointError, like, to_json_value
from accelerate_core.errors import explain


@dataclass
class NeutralOptimizer:
    """One optimizer's state as in optimizer_{i}.json / .safetensors."""

    class_name: str
    model_index: int
    #: each group's hyperparameters, with "params" a list of parameter names
    param_groups: list[dict[str, Any]]
    #: name -> {state key -> full-shape tensor}
    tensors: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    #: name -> {state key -> JSON value}
    scalars: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "class": self.class_name,
            "model_index": self.model_index,
            "param_groups": self.param_groups,
            "state": self.scalars,
        }

    def flat_tensors(self) -> dict[str, torch.Tensor]:
        return {
            f"{name}/{key}": value for name, entry in self.tensors.items() for key, value in entry.items()
        }

    @classmethod
    def from_files(cls, document: Mapping[str, Any], flat: Mapping[str, torch.Tensor]) -> NeutralOptimizer:
        tensors: dict[str, dict[str, torch.Tensor]] = {}
        for key, value in flat.items():
            name, _, state_key = key.rpartition("/")
            tensors.setdefault(name, {})[state_key] = value
        return cls(
            str(document["class"]),
            int(document["model_index"]),
            [dict(g) for g in document["param_groups"]],
            tensors,
            {k: dict(v) for k, v in document.get("state", {}).items()},
        )

    def names_with_state(self) -> set[str]:
        return set(self.tensors) | set(self.scalars)

    def state_of(self, name: str) -> dict[str, Any]:
        return {**self.scalars.get(name, {}), **self.tensors.get(name, {})}


def class_name(optimizer: Any) -> str:
    return f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"


def hyperparameters(group: Mapping[str, Any], where: str) -> dict[str, Any]:
    return {k: to_json_value(v, f"{where}[{k!r}]") for k, v in group.items() if k != "params"}


def names_by_parameter(models: Sequence[nn.Module]) -> list[dict[int, str]]:
    """For each model, id(parameter) -> its name (the first name of a tied parameter)."""
    out: list[dict[int, str]] = []
    for model in models:
        names: dict[int, str] = {}
        for name, param in model.named_parameters(remove_duplicate=True):
            names.setdefault(id(param), name)
        out.append(names)
    return out


def owning_model(groups: Sequence[Sequence[Any]], models: Sequence[nn.Module]) -> tuple[int, dict[int, str]]:
    """The one model whose parameters the optimizer holds, and that model's names."""
    ids = {id(p) for group in groups for p in group}
    for index, names in enumerate(names_by_parameter(models)):
        if ids <= set(names):
            return index, names
    raise CheckpointError(
        explain(
            "save_state/load_state with an optimizer over parameters of several models (or of none)",
            "the checkpoint names optimizer state by the parameter's name in ONE prepared model",
            "an optimizer whose parameters all belong to one prepared model",
            "give each model its own optimizer, or combine the models in one nn.Module",
        )
    )


def export_torch(
    optimizer: torch.optim.Optimizer, models: Sequence[nn.Module], where: str
) -> NeutralOptimizer:
    """A plain torch optimizer (whole parameters on this process) in the neutral form."""
    index, names = owning_model([g["params"] for g in optimizer.param_groups], models)
    groups = [
        {**hyperparameters(g, f"{where}.param_groups[{i}]"), "params": [names[id(p)] for p in g["params"]]}
        for i, g in enumerate(optimizer.param_groups)
    ]
    neutral = NeutralOptimizer(class_name(optimizer), index, groups)
    for param, state in optimizer.state.items():
        name = names[id(param)]
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                tensor = value.detach().to("cpu")
                if tensor.is_floating_point() and tensor.shape == param.shape:
                    tensor = tensor.float()
                neutral.tensors.setdefault(name, {})[key] = tensor
            else:
                neutral.scalars.setdefault(name, {})[key] = to_json_value(
                    value, f"{where}.state[{name!r}][{key!r}]"
                )
    return neutral


def check_groups(saved: NeutralOptimizer, live_groups: Sequence[Sequence[str]], where: str) -> None:
    """The saved param groups must hold the same parameter names as the prepared optimizer's."""
    saved_groups = [list(g["params"]) for g in saved.param_groups]
    if [sorted(g) for g in saved_groups] != [sorted(g) for g in live_groups]:
        raise CheckpointError(
            explain(
                f"load_state: {where} has {len(saved_groups)} param group(s) of "
                f"{[len(g) for g in saved_groups]} parameters",
                f"the prepared optimizer has {len(live_groups)} group(s) of "
                f"{[len(g) for g in live_groups]} parameters" + _first_difference(saved_groups, live_groups),
                "the same param groups, holding the same parameter names, as when it was saved",
                "build the optimizer with the same param groups as the run that saved it",
            )
        )


def _first_difference(saved: Sequence[Sequence[str]], live: Sequence[Sequence[str]]) -> str:
    for i, (a, b) in enumerate(zip(saved, live, strict=False)):
        only_saved, only_live = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        if only_saved or only_live:
            return f" (group {i}: only in the checkpoint {only_saved[:3]}, only prepared {only_live[:3]})"
    return ""


def check_state_present(saved: NeutralOptimizer, expected: Sequence[str], where: str) -> None:
    missing = [n for n in expected if n not in saved.names_with_state()]
    if missing and saved.names_with_state():
        raise CheckpointError(
            explain(
                f"load_state: {where}",
                f"it has no state for parameter(s) {missing[:5]} while it has "
                "state for others (the optimizer file is incomplete)",
                "state for every parameter that had stepped",
                "write the checkpoint again with save_state",
            )
        )


def import_torch(
    optimizer: torch.optim.Optimizer, models: Sequence[nn.Module], saved: NeutralOptimizer, where: str
) -> None:
    """Load the neutral state into a plain torch optimizer through its own load_state_dict
    (which moves state to each parameter's device and dtype)."""
    index, names = owning_model([g["params"] for g in optimizer.param_groups], models)
    if index != saved.model_index:
        raise CheckpointError(
            explain(
                f"load_state: {where} holds state of model {saved.model_index}'s parameters",
                f"the prepared optimizer holds model {index}'s",
                "models and optimizers prepared in the order of the run that saved them",
                "pass them to prepare() in that order",
            )
        )
    live = [[names[id(p)] for p in g["params"]] for g in optimizer.param_groups]
    check_groups(saved, live, where)
    check_state_present(saved, [n for g in live for n in g], where)
    position = {name: i for i, name in enumerate(n for g in live for n in g)}
    groups = []
    for live_group, group, saved_group in zip(optimizer.param_groups, live, saved.param_groups, strict=True):
        values = {k: like(live_group.get(k), v) for k, v in saved_group.items() if k != "params"}
        groups.append({**values, "params": [position[n] for n in group]})
    state = {position[name]: saved.state_of(name) for name in position if name in saved.names_with_state()}
    optimizer.load_state_dict({"state": state, "param_groups": groups})
