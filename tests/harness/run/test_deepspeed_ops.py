"""DeepSpeed's CPU op build before any launch (harness.run.deepspeed_ops): where torch builds it,
and that a cached op costs no child process. (A real build, 60-90 s, is measured by hand: see
the module's docstring and docs/reading-the-report.md.)"""

from __future__ import annotations

import os
from pathlib import Path

from harness.run.deepspeed_ops import OP_NAME, build_directory, ensure_deepspeed_ops


def test_the_build_directory_follows_torch_extensions_dir(tmp_path: Path) -> None:
    assert build_directory({"TORCH_EXTENSIONS_DIR": str(tmp_path)}) == tmp_path / OP_NAME
    default = build_directory({k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"})
    assert default.name == OP_NAME and default.parent.name.startswith("py3")


def test_a_cached_op_is_not_rebuilt_and_costs_nothing(tmp_path: Path) -> None:
    folder = tmp_path / OP_NAME
    folder.mkdir()
    (folder / f"{OP_NAME}.so").write_bytes(b"")  # what a finished build leaves
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "PATH": ""}  # no compiler reachable
    assert ensure_deepspeed_ops(env) == {"launch": "deepspeed-ops", "cached": True, "startup_s": 0.0}
