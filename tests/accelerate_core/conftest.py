"""Fixtures of the core's tests: 2-rank MISSION runs shared by the tests that read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.distributed_helpers import run_distributed

SCRIPTS = Path(__file__).resolve().parent / "scripts"
MISSION = SCRIPTS / "mission_loop.py"


def run_mission(out: Path, *args: str, nproc: int = 2) -> dict[str, Any]:
    """Run the user loop on `nproc` CPU ranks; return rank 0's record (with `model_path`)."""
    out.mkdir(parents=True, exist_ok=True)
    run_distributed(MISSION, nproc, ["--cpu", "--out", str(out), *args], timeout=240)
    record: dict[str, Any] = torch.load(out / "record.pt", weights_only=False)
    record["model_path"] = out / "model.pt"
    return record


@pytest.fixture(autouse=True)
def _no_launch_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process tests must not pick up a launcher's variables from the calling shell."""
    import os

    for name in list(os.environ):
        if name.startswith("ACCELERATE_CORE_") or name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
            monkeypatch.delenv(name)
