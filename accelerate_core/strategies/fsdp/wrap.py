"""Which modules of a model become FSDP2 units, and applying `fully_shard` to them.

fully_shard is applied innermost first and to the root last: a unit owns the parameters of its
subtree that no inner unit owns, so sharding a parent first would leave its children nothing to
shard. The root is always a unit, so every parameter ends up a sharded DTensor; what actually
happened is returned as a `ShardingReport` (the evidence the harness records later).

Two rules on top of the user's wrap (docs/fsdp.md):
- tied parameters (one tensor registered in several modules, e.g. an LM head tied to its
  embedding) must be managed by ONE unit: fully_shard refuses a parameter already managed by
  another unit. The default wrap leaves a child whose parameters are shared outside it to the
  enclosing unit; an explicit wrap that splits a tie is refused at prepare() with the names.
- under a half policy every BatchNorm becomes a unit of its own computing in fp32 (as FSDP1 did
  by default and as autocast runs batch_norm): its running statistics are fp32 buffers, and
  batch_norm refuses half weights with fp32 statistics on CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import nn
from torch.distributed.tensor import DTensor
from torch.nn.modules.batchnorm import _BatchNorm

from accelerate_core.errors import InvalidSettingError, UnsupportedObjectError, explain
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


def choose_units(model: nn.Module, plugin: FSDPPlugin, batchnorm_units: bool = False) -> list[str]:
    """The qualified names of the submodules to shard, innermost first, the root last.

    `batchnorm_units`: also make every BatchNorm a unit (under a half policy, to keep it fp32).
    Raises InvalidSettingError when the units would split a tied parameter."""
    owners = parameter_owners(model)
    wants = _policy(plugin, owners)
    # named_modules() lists parents before children; reversed, children come first.
    names = [name for name, module in reversed(list(model.named_modules()))
             if name and (wants(name, module) or (batchnorm_units and is_batchnorm(module)))]
    units = [*names, ROOT]
    check_ties(owners, units)
    return units


def is_batchnorm(module: nn.Module) -> bool:
    """BatchNorm of any dimension, SyncBatchNorm (torch's and the core's) included."""
    return isinstance(module, _BatchNorm)


def parameter_owners(model: nn.Module) -> dict[int, list[tuple[str, str]]]:
    """id(parameter) -> every (module name, attribute) that registers it: more than one for a
    tied parameter."""
    owners: dict[int, list[tuple[str, str]]] = {}
    for module_name, module in model.named_modules():
        for attribute, param in module.named_parameters(recurse=False, remove_duplicate=False):
            owners.setdefault(id(param), []).append((module_name, attribute))
    return owners


def _inside(module_name: str, unit: str) -> bool:
    return unit == ROOT or module_name == unit or module_name.startswith(unit + ".")


def _shared_outside(name: str, module: nn.Module, owners: dict[int, list[tuple[str, str]]]) -> bool:
    """Whether a parameter of `module`'s subtree is also registered in a module outside it."""
    return any(not _inside(owner, name) for p in module.parameters() for owner, _ in owners[id(p)])


def _policy(plugin: FSDPPlugin, owners: dict[int, list[tuple[str, str]]]) -> Callable[[str, nn.Module], bool]:
    wrap = plugin.wrap
    if wrap is None:
        # Each direct child that holds parameters: the usual block-by-block layout. A child that
        # shares a parameter with a module outside it (a head tied to the embedding) is left to
        # the root, so the tied parameter lives in one unit.
        return lambda name, module: ("." not in name and any(True for _ in module.parameters())
                                     and not _shared_outside(name, module, owners))
    if isinstance(wrap, tuple):
        classes = wrap
        return lambda name, module: isinstance(module, classes)
    policy: Callable[[str, Any], bool] = wrap  # type: ignore[assignment]
    return lambda name, module: bool(policy(name, module))


def _managing_unit(module_name: str, units: list[str]) -> str:
    """The innermost unit containing `module_name` (units are innermost first, root last)."""
    return next(unit for unit in units if _inside(module_name, unit))


def check_ties(owners: dict[int, list[tuple[str, str]]], units: list[str]) -> None:
    """Refuse units that would put one tied parameter into two units (fully_shard's own error
    names neither unit nor the way out)."""
    for places in owners.values():
        managed = [(f"{m}.{a}" if m else a, m, _managing_unit(m, units)) for m, a in places]
        (first, first_module, first_unit), *rest = managed
        for name, module, unit in rest:
            if unit != first_unit:
                raise InvalidSettingError(explain(
                    f"FSDPPlugin(wrap=...) puts parameter {first!r} (module {_label(first_module)}) in "
                    f"{_unit(first_unit)} and {name!r}, the same tied tensor (module "
                    f"{_label(module)}), in {_unit(unit)}",
                    "fully_shard shards each parameter in exactly one unit, so a tied parameter "
                    "split over two units cannot stay one tensor",
                    "a wrap under which every module sharing a parameter falls into one unit",
                    f"leave {_label(first_module)} and {_label(module)} out of wrap (their parameters "
                    "fall to the enclosing unit, the root if none), wrap a module containing both, "
                    "or leave wrap out (the default keeps ties in one unit)",
                ))


def _label(module_name: str) -> str:
    return repr(module_name) if module_name else "the root"


def _unit(unit: str) -> str:
    return f"unit {unit!r}" if unit else "the root unit"


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
    units = choose_units(model, plugin, batchnorm_units=precision.param_dtype is not None)
    offload = CPUOffloadPolicy() if plugin.cpu_offload else OffloadPolicy()
    modules = dict(model.named_modules())
    for name in units:
        module = modules[name]
        fully_shard(module, mesh=mesh, reshard_after_forward=plugin.reshard_after_forward,
                    mp_policy=precision.policy(name == ROOT, fp32=is_batchnorm(module)),
                    offload_policy=offload)
    params = list(model.named_parameters())
    return ShardingReport(
        wrapped=tuple(units),
        unsharded=tuple(n for n, p in params if not isinstance(p, DTensor)),
        shard_numel={n: (p.to_local().numel() if isinstance(p, DTensor) else p.numel(), p.numel())
                     for n, p in params},
    )
