"""Where the repository's own matrix and goldens live (the defaults; `--matrix` overrides)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MATRIX_PATH = REPO_ROOT / "matrix" / "matrix.toml"
GOLDEN_DIR = REPO_ROOT / "matrix" / "golden"
