"""Where the repository's own matrix and goldens live (the defaults; `--matrix` overrides), and
where the goldens of any other matrix file live: in `golden/` beside it.

`HARNESS_GOLDEN_DIR` replaces the repository's golden folder for a whole process tree. It exists
for one purpose: running the tests and cells against goldens that look made on another machine
(`nox -s foreign_goldens`, harness/golden/foreign_goldens.py), so that a test assuming the goldens
were made on the machine running it fails here, not on a user's machine.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MATRIX_PATH = REPO_ROOT / "matrix" / "matrix.toml"
GOLDEN_DIR_VARIABLE = "HARNESS_GOLDEN_DIR"
REPOSITORY_GOLDEN_DIR = REPO_ROOT / "matrix" / "golden"  # the checked-in goldens, whatever the variable says
GOLDEN_DIR = Path(os.environ.get(GOLDEN_DIR_VARIABLE) or REPOSITORY_GOLDEN_DIR)
GOLDEN_FOLDER_NAME = "golden"


def golden_dir_for(matrix_path: str | Path | None) -> Path | None:
    """The goldens of the matrix at `matrix_path`: `<its folder>/golden/`. None for the
    repository's own matrix (and no path): the harness's `GOLDEN_DIR`, looked up when used."""
    if matrix_path is None:
        return None
    path = Path(matrix_path).resolve()
    return None if path == MATRIX_PATH.resolve() else path.parent / GOLDEN_FOLDER_NAME


def is_default_matrix(matrix_path: str | Path | None) -> bool:
    return golden_dir_for(matrix_path) is None
