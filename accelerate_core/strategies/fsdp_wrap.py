"""Which modules of a model become FSDP2 units, and applying `fully_shard` to them.

fully_shard is applied innermost first and to the root last: a unit owns the parameters of its
subtree that no inner unit owns, so sharding a parent first would leave its children nothing to
shard. The root is always a unit, so every parameter ends up a sharded DTensor; what actually
happened is returned as a `ShardingReport` (the evidence the harness records later).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import nn
from torch.distributed.tensor import DTensor

from accelerate_core.errors import UnsupportedObjectError, explain
from accelerate_core.fsdp_plugin import FSDPPlugin

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from accelerate_core.precision.fsdp import FSDPPrecision

ROOT = ""  # the qualified name of the model itself in a ShardingReport


@dataclass(frozen=True)
class ShardingReport:
    """One prepared model: the units (qualified names, innermost first, "" the root) and the
    parameters that stayed plain tensors (none, when sharding worked)."""

    wrapped: tuple[str, ...]
    unsharded: tuple[str, ...]
    #: parameter name -> (this rank's shard size, the full size) in elements
    shard_numel: dict[str, tuple[int, int]]


def choose_units(model: nn.Module, plugin: FSDPPlugin) -> list[str]:
    """The qualified names of the submodules to shard, innermost first, the root last."""
    wants = _policy(plugin)
    # named_modules() lists parents before children; reversed, children come first.
    names = [name for name, module in reversed(list(model.named_modules())) if name and wants(name, module)]
    return [*names, ROOT]


def _policy(plugin: FSDPPlugin) -> Callable[[str, nn.Module], bool]:
    wrap = plugin.wrap
    if wrap is None:
        # Each direct child that holds parameters: the usual block-by-block layout.
        return lambda name, module: "." not in name and any(True for _ in module.parameters())
    if isinstance(wrap, tuple):
        classes = wrap
        return lambda name, module: isinstance(module, classes)
    policy: Callable[[str, Any], bool] = wrap  # type: ignore[assignment]
    return lambda name, module: bool(policy(name, module))


def shard_model(model: nn.Module, plugin: FSDPPlugin, mesh: DeviceMesh,
                precision: FSDPPrecision) -> ShardingReport:
    """fully_shard the chosen units of `model` in place (its class and parameters change: the
    parameters become new DTensor objects) and report what was sharded."""
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, OffloadPolicy, fully_shard

    if isinstance(model, FSDPModule):
        raise UnsupportedObjectError(
            explain(f"prepare() got a {type(model).__name__} already sharded by fully_shard",
                    "the FSDP strategy shards the model itself, by FSDPPlugin(wrap=...)",
                    "the user's plain nn.Module", "pass the model before any fully_shard call")
        )
    units = choose_units(model, plugin)
    offload = CPUOffloadPolicy() if plugin.cpu_offload else OffloadPolicy()
    modules = dict(model.named_modules())
    for name in units:
        root = name == ROOT
        fully_shard(modules[name], mesh=mesh, reshard_after_forward=plugin.reshard_after_forward,
                    mp_policy=precision.policy(root), offload_policy=offload)
    params = list(model.named_parameters())
    return ShardingReport(
        wrapped=tuple(units),
        unsharded=tuple(n for n, p in params if not isinstance(p, DTensor)),
        shard_numel={n: (p.to_local().numel() if isinstance(p, DTensor) else p.numel(), p.numel())
                     for n, p in params},
    )
