"""Evidence that a task draws random numbers during training (dropout, random augmentation in
the forward pass): each rank's generator state compared across every training micro-step.

Why it matters: a multi-process run draws from one stream per process, the single-process golden
from one stream for the whole batch, so their masks differ and any agreement with the golden is
luck (the judge, harness.judge.cell_verdict, fails such cells with that reason rather than pass them).

A micro-step runs from its training forward (the rank's recorder, harness.rank.recorder, hooks
the prepared model) to the next one's, and one with an optimizer step ends with that step (the
batch fetch in between draws nothing with the loader's sequential sampler). Every epoch ends with
an optimizer step, so the next epoch's loader iterator (which draws its base seed) is not counted.
"""

from __future__ import annotations

from typing import Any

import torch


class RandomDraws:
    def __init__(self, device: torch.device) -> None:
        self._device = device
        self._open: dict[str, torch.Tensor] | None = None
        self.steps = 0
        self.drawing = 0
        self.generators: set[str] = set()

    def _states(self) -> dict[str, torch.Tensor]:
        states = {"torch CPU generator": torch.get_rng_state()}
        if self._device.type == "cuda":
            states["torch CUDA generator"] = torch.cuda.get_rng_state(self._device)
        return states

    def begin(self) -> None:
        """The top of a micro-step (closes the one before)."""
        self.end()
        self._open = self._states()

    def end(self) -> None:
        """After a micro-step's optimizer step (and harmless anywhere else)."""
        if self._open is None:
            return
        after = self._states()
        changed = [name for name, before in self._open.items() if not torch.equal(before, after[name])]
        self.steps += 1
        if changed:
            self.drawing += 1
            self.generators.update(changed)
        self._open = None

    def evidence(self) -> dict[str, Any]:
        self.end()
        generators = ", ".join(sorted(self.generators))
        return {"steps": self.steps, "drawing": self.drawing, "generators": generators}
