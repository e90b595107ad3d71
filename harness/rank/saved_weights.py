"""The final weights as the user loop keeps them: `accelerator.save(accelerator.get_state_dict(model),
path)`, the last line of docs/the-user-loop.md, read back from the file.

The record's state dict is what that file holds, not the dict in memory: a core whose save writes
another dtype, drops or renames a key, or writes nothing on the main process fails the cell's
state_dict comparisons (or raises here), where comparing the dict in memory would pass it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch


def saved_and_read_back(accelerator: Any, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every rank calls save, as the user loop does (the core writes on the main process only);
    the main process reads the file back. Other ranks get {} (their records are not kept)."""
    with tempfile.TemporaryDirectory(prefix="harness-saved-weights-") as folder:
        path = Path(folder) / "model.pt"
        accelerator.save(state_dict, path)
        if not accelerator.is_main_process:
            return {}
        if not path.is_file():
            raise RuntimeError(f"accelerator.save(state_dict, {str(path)!r}) wrote no file on the main "
                               "process")
        loaded: dict[str, torch.Tensor] = torch.load(path, map_location="cpu", weights_only=True)
        return loaded
