"""`FSDPPlugin`: how the user asks for FSDP2 (`torch.distributed.fsdp.fully_shard`).

Importable without torch (like `DeepSpeedPlugin`), so `import accelerate_core` stays light: this
file only checks each field on its own. The connector checks the plugin against the other
settings (one process, `cpu=`); the FSDP strategy (strategies/fsdp/strategy.py) applies it.

What gets sharded is `wrap`:
- None (the default): every direct child of the model that holds parameters, then the root,
  the usual "one unit per block" layout (each Linear of an nn.Sequential, each layer of a
  stack of blocks);
- a sequence of module classes: every submodule of one of those classes (innermost first),
  then the root;
- a callable `wrap(name, module) -> bool`, asked for every submodule (`name` its qualified
  name in the model), innermost first; the root is always sharded last, so that no parameter
  is left as a plain tensor.

On top of `wrap` (strategies/fsdp/wrap.py, docs/fsdp.md): the default leaves a child whose
parameters are tied to a module outside it (an LM head tied to the embedding) to the root, and
an explicit wrap that splits a tie is refused at prepare(); under fp16/bf16 every BatchNorm is
a unit of its own computing in fp32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Union

from accelerate_core.errors import InvalidSettingError, explain

#: what `FSDPPlugin.wrap` takes (the module type is `torch.nn.Module`, not imported here)
WrapPolicy = Union[Sequence[type], Callable[[str, Any], bool], None]  # noqa: UP007 - a runtime alias


@dataclass
class FSDPPlugin:
    wrap: WrapPolicy = None
    # FSDP2's own switch: free the unsharded parameters after each unit's forward (all-gather
    # them again in backward, less memory), or keep them until backward (less communication).
    reshard_after_forward: bool = True
    # Keep the sharded parameters and gradients in CPU memory and step the optimizer there
    # (FSDP2's CPUOffloadPolicy). Only meaningful on CUDA: a CPU run has nothing to offload.
    cpu_offload: bool = False

    def __post_init__(self) -> None:
        for name in ("reshard_after_forward", "cpu_offload"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise InvalidSettingError(
                    explain(f"FSDPPlugin({name}={value!r})", f"{name} is a switch", "True, False",
                            f"pass {name}=True or {name}=False")
                )
        wrap = self.wrap
        if wrap is None or (callable(wrap) and not isinstance(wrap, type)):
            return
        if isinstance(wrap, (str, bytes)) or not isinstance(wrap, Sequence) \
                or not wrap or not all(isinstance(c, type) for c in wrap):
            raise InvalidSettingError(
                explain(
                    f"FSDPPlugin(wrap={wrap!r})",
                    "wrap says which submodules become FSDP units",
                    "None (each direct child holding parameters), a non-empty list of module "
                    "classes, or a callable (name, module) -> bool",
                    "pass e.g. wrap=[MyBlock] or wrap=lambda name, module: ..., or leave it out",
                )
            )
        self.wrap = tuple(wrap)
