"""Each rank's random streams as JSON (Python, NumPy) and tensors (torch CPU, CUDA).

Every rank draws its own random numbers (dropout, augmentation) and resumes its own stream.
"""

from __future__ import annotations

import random
from typing import Any

import torch


def capture() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(JSON part, tensor part) of this process's random streams."""
    version, internal, gauss = random.getstate()
    document: dict[str, Any] = {"python": [version, list(internal), gauss]}
    try:
        import numpy as np  # optional: only when the user has it

        kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        document["numpy"] = [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)]
    except ImportError:
        pass
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for index in range(torch.cuda.device_count()):
            tensors[f"cuda.{index}"] = torch.cuda.get_rng_state(index)
    return document, tensors


def restore(document: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    version, internal, gauss = document["python"]
    random.setstate((version, tuple(internal), gauss))
    if "numpy" in document:
        try:
            import numpy as np

            kind, keys, pos, has_gauss, cached = document["numpy"]
            np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
        except ImportError:
            pass  # written where NumPy was installed; nothing here draws from it
    torch.set_rng_state(tensors["torch"])
    if torch.cuda.is_available():
        for key, value in tensors.items():
            if key.startswith("cuda.") and int(key.split(".", 1)[1]) < torch.cuda.device_count():
                torch.cuda.set_rng_state(value, int(key.split(".", 1)[1]))
