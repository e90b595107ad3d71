"""Recording a user's Hugging Face Accelerate script with no change to it (docs/script-mode.md):
loaded in the launched processes by harness.script.accelerate_site once `accelerate.accelerator`
is imported. `watch(Accelerator)` wraps `Accelerator.__init__` so that each Accelerator, once
made, gets the matrix's recording shim on the instance
(harness.implementations.accelerate_shim.install: wrappers of its `prepare`, `backward`, `gather`,
`gather_for_metrics`, `get_state_dict` and of its prepared optimizers' `step`), which tells one
recorder per process: the core's `Recorder` (accelerate_core/recording.py), writing `record.pt` on
the main process at exit, with what ran read by the Accelerate adapter
(harness.implementations.accelerate) from the objects Accelerate built.

The record is the core's format: script mode judges both implementations' scripts alike.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

import accelerate_core.ops as ops
from accelerate_core.recording import RECORD_DIR_VARIABLE, Recorder

# Frames skipped to find the script's gather call: the core, the shim, the harness, Accelerate.
_HARNESS_DIR = str(Path(__file__).resolve().parent.parent)
_CORE_DIR = str(Path(ops.__file__).resolve().parent)

_recorder: AccelerateRecorder | None = None


class AccelerateRecorder(Recorder):
    """The core's script recorder, told by the shim's wrappers instead of the core's Accelerator:
    Accelerate's optimizers and what ran are read the Accelerate way."""

    @staticmethod
    def _is_optimizer(prepared: Any) -> bool:
        return hasattr(prepared, "step_was_skipped")  # Accelerate's AcceleratedOptimizer

    @staticmethod
    def _call_site() -> str:
        return _script_site()

    @staticmethod
    def _what_ran(accelerator: Any, prepared: list[Any]) -> dict[str, Any]:
        """The record's evidence, read by the Accelerate adapter from the objects that ran: the
        first prepared model (its wrapper class or DeepSpeed engine), the process group, where the
        parameters are; the precision from the autocast Accelerate put on the model's forward (or
        the engine's own), loss scaling from a GradScaler or the engine's loss scale."""
        from harness.implementations.accelerate import AccelerateAdapter

        model = next((obj for obj in prepared if isinstance(obj, nn.Module)), None)
        if model is None:
            return {"strategy": "none", "world_size": 0, "device": "none", "mixed_precision": "none",
                    "loss_scaling": False, "zero_stage": None, "emulated": False}
        adapter = AccelerateAdapter()
        ran = adapter.what_ran(accelerator, model)
        engine = ran.get("deepspeed")
        return {
            "strategy": ran["strategy"],
            "world_size": ran["world_size"],
            "device": ran["device"],
            "mixed_precision": _precision_that_ran(accelerator, model),
            "loss_scaling": adapter.loss_scale(accelerator) is not None,
            "zero_stage": engine["zero_stage"] if isinstance(engine, dict) else None,
            "emulated": ran["emulated"],
            "accelerate": ran["strategy_class"],  # what Accelerate says it runs (its DistributedType)
        }


def _precision_that_ran(accelerator: Any, model: nn.Module) -> str:
    """"bf16" / "fp16" when Accelerate wrapped the model's forward in autocast (it keeps the
    original forward as `_original_forward` on the model it wrapped) or the DeepSpeed engine runs
    in that precision; "no" otherwise (fp16 on CPU: Accelerate asks for it and runs fp32)."""
    if type(model).__name__ == "DeepSpeedEngine":
        engine: Any = model
        if engine.bfloat16_enabled():
            return "bf16"
        return "fp16" if engine.fp16_enabled() else "no"
    inner = getattr(model, "module", model)
    if hasattr(inner, "_original_forward") or hasattr(model, "_original_forward"):
        return str(accelerator.mixed_precision)
    return "no"


def _script_site() -> str:
    """`file.py:LINE` of the first frame outside the harness, the core and Accelerate: the
    script's gather call."""
    import accelerate

    from accelerate_core.recording import _call_site

    return _call_site((_HARNESS_DIR, _CORE_DIR, str(Path(accelerate.__file__).resolve().parent)))


def recorder_for(accelerator: Any) -> AccelerateRecorder:
    """The process's recorder, made on the first Accelerator (its main process writes the file)."""
    global _recorder
    if _recorder is None:
        _recorder = AccelerateRecorder(Path(os.environ[RECORD_DIR_VARIABLE]),
                                       bool(accelerator.is_main_process))
        atexit.register(_recorder.write)
    return _recorder


def watch(accelerator_class: Any) -> None:
    """Every Accelerator made from now on gets the recording shim on the instance."""
    from harness.implementations.accelerate_shim import install

    init = accelerator_class.__init__
    if getattr(init, "_harness_records", False):
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if not getattr(self, "_harness_recorded", False):  # a subclass calling super().__init__
            self._harness_recorded = True
            observers: Sequence[Any] = [recorder_for(self)]
            install(self, observers)

    __init__._harness_records = True  # type: ignore[attr-defined]
    accelerator_class.__init__ = __init__
