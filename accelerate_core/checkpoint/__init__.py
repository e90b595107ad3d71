"""The backend-neutral checkpoint of `Accelerator.save_state` (docs/checkpoint-format.md).

Tensors in safetensors, everything else in JSON, a manifest written last. Strategies turn their
own layout into the neutral pieces (full fp32 weights, optimizer state per parameter NAME) and
back; this package owns the files, their validation and the error messages, and writes every
file atomically (atomic.py, which also backs `Accelerator.save`).
"""

from accelerate_core.checkpoint.layout import FORMAT_VERSION, CheckpointError
from accelerate_core.checkpoint.reader import CheckpointReader
from accelerate_core.checkpoint.writer import CheckpointWriter

__all__ = ["FORMAT_VERSION", "CheckpointError", "CheckpointReader", "CheckpointWriter"]
