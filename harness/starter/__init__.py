"""`python -m harness init DIR`: a starter matrix.toml and an example task package in a user's
repository, which run as written (golden --update, then run)."""

from __future__ import annotations

import json
import keyword
from pathlib import Path

from harness.atomic_files import write_text_atomic
from harness.errors import UsageError, explain
from harness.paths import MATRIX_PATH
from harness.plan.matrix import load_matrix
from harness.starter.templates import MATRIX, MODELS, PACKAGE_INIT, TASKS

DEFAULT_PACKAGE = "my_tasks"


def starter_files(directory: Path, package: str) -> dict[Path, str]:
    """What init writes, by path."""
    if not package.isidentifier() or keyword.iskeyword(package) or package != package.lower():
        raise UsageError(explain(f"--package {package!r}", "it is not a lowercase Python module name",
                                 "letters, digits and underscores, not starting with a digit",
                                 "pass e.g. --package my_tasks"))
    values = {"package": package, "tolerances": tolerances_text()}
    return {
        directory / "matrix.toml": MATRIX.format(**values),
        directory / package / "__init__.py": PACKAGE_INIT,
        directory / package / "models.py": MODELS,
        directory / package / "tasks.py": TASKS.format(**values),
    }


def write_starter(directory: Path, package: str = DEFAULT_PACKAGE, force: bool = False) -> list[Path]:
    files = starter_files(directory, package)
    existing = [path for path in files if path.exists()]
    if existing and not force:
        raise UsageError(explain(
            f"init {directory}", "it would overwrite " + ", ".join(str(p) for p in existing),
            "a folder without these files", "pick another folder or --package, or pass --force"))
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
    return list(files)


def tolerances_text() -> str:
    """The harness's own tolerance table, as TOML, each entry with its reason."""
    table = load_matrix(MATRIX_PATH).raw.get("tolerances", {})
    lines = ["[tolerances]"]
    for precision, families in table.items():
        if not isinstance(families, dict):  # weights_per_task: the harness's own tasks' weights only
            continue
        for family, entry in families.items():
            lines += ["", f"[tolerances.{precision}.{family}]"]
            lines += [f"{key} = {json.dumps(value)}" for key, value in entry.items()
                      if not isinstance(value, dict)]
            for kind, sub in entry.items():  # per-quantity sub-tables ([tolerances.fp16.plain.losses])
                if isinstance(sub, dict):
                    lines += ["", f"[tolerances.{precision}.{family}.{kind}]"]
                    lines += [f"{key} = {json.dumps(value)}" for key, value in sub.items()]
    return "\n".join(lines) + "\n"
