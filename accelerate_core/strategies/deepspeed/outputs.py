"""Let ZeRO-3 see the tensors inside a module's dataclass output.

ZeRO-3 re-gathers a module's partitioned parameters for backward through hooks it attaches to
the tensors of that module's forward output (deepspeed/runtime/zero/parameter_offload.py,
`_pre_backward_module_hook` -> runtime/zero/utils.py:apply_to_tensors_only). That walk looks
into tuples, lists and dicts only. A model returning a plain dataclass (the user loop's
`output.loss`) gets no hook, so a parameter the module owns directly (not through a submodule
whose output is a tensor) is still partitioned when backward needs it: the first backward fails
with "The size of tensor a (0) must match the size of tensor b (N)". Measured with DeepSpeed
0.19.8 alone, without the core.

The reconciliation, on every module of the user's model: a forward hook that runs BEFORE
DeepSpeed's (prepend=True) turns a dataclass output, nested ones too, into a `_FieldsDict`, a
dict that DeepSpeed's walk edits in place (replacing each tensor by its hooked alias); a hook that
runs AFTER DeepSpeed's turns it back into an instance of the same dataclass type holding the
hooked tensors. The user sees the same type and values; only autograd sees DeepSpeed's hooks.
Instances are rebuilt with copy.copy plus field assignment (not dataclasses.replace) so that
frozen dataclasses, init=False fields and __post_init__ side effects behave as in the original.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from torch import nn
from torch.utils.hooks import RemovableHandle


class _FieldsDict(dict[str, Any]):
    """A dataclass instance's fields as a dict, remembering the instance to rebuild."""

    def __init__(self, original: Any, fields: dict[str, Any]) -> None:
        super().__init__(fields)
        self.original = original


def _is_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def to_dicts(value: Any) -> Any:
    """Dataclass instances (at any depth in dataclasses, lists, tuples, dicts) -> _FieldsDict."""
    if _is_instance(value):
        fields = {f.name: to_dicts(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return _FieldsDict(value, fields)
    if isinstance(value, dict) and not isinstance(value, _FieldsDict):
        converted = {k: to_dicts(v) for k, v in value.items()}
        if any(converted[k] is not value[k] for k in value):
            for key, item in converted.items():  # in place, as DeepSpeed does for dicts
                value[key] = item
        return value
    if isinstance(value, (list, tuple)):
        items = [to_dicts(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
            return type(value)(*items)
        return type(value)(items)
    return value


def from_dicts(value: Any) -> Any:
    """The inverse of to_dicts, with whatever tensors DeepSpeed put into the dicts."""
    if isinstance(value, _FieldsDict):
        rebuilt = copy.copy(value.original)
        for name, item in value.items():
            object.__setattr__(rebuilt, name, from_dicts(item))  # frozen dataclasses too
        return rebuilt
    if isinstance(value, dict):
        for key in list(value):
            value[key] = from_dicts(value[key])
        return value
    if isinstance(value, (list, tuple)):
        items = [from_dicts(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*items)
        return type(value)(items)
    return value


def _contains_dataclass(value: Any) -> bool:
    if _is_instance(value):
        return True
    if isinstance(value, dict):
        return any(_contains_dataclass(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_contains_dataclass(v) for v in value)
    return False


def _before_deepspeed(module: nn.Module, args: Any, output: Any) -> Any:
    return to_dicts(output) if _contains_dataclass(output) else None


def _contains_fields_dict(value: Any) -> bool:
    if isinstance(value, _FieldsDict):
        return True
    if isinstance(value, dict):
        return any(_contains_fields_dict(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_contains_fields_dict(v) for v in value)
    return False


def _after_deepspeed(module: nn.Module, args: Any, output: Any) -> Any:
    return from_dicts(output) if _contains_fields_dict(output) else None


def expose_dataclass_outputs(model: nn.Module) -> list[RemovableHandle]:
    """Install the two hooks on every module of `model`; call AFTER deepspeed.initialize (so the
    'after' hook follows DeepSpeed's). Returns the handles, for removal at teardown."""
    handles: list[RemovableHandle] = []
    for module in model.modules():
        handles.append(module.register_forward_hook(_before_deepspeed, prepend=True))
        handles.append(module.register_forward_hook(_after_deepspeed))
    return handles
