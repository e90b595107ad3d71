"""What ran, read from the objects that ran, never from what was asked for: the one `what_ran()`
every record of a run uses (script mode's recorder, accelerate_core/recording.py, and any tool's
observer, accelerate_core/observers.py). `what_ran.py` reads the backend, world size and device;
`deepspeed.py` the engine; `fsdp.py` FSDP2's sharding."""

from __future__ import annotations

from accelerate_core.evidence.what_ran import precision_in_use, what_ran

__all__ = ["precision_in_use", "what_ran"]
