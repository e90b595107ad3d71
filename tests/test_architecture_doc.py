"""docs/architecture.md is checked against the code: every module or folder of the core and the
harness it names exists, and every module it names imports. And the harness's modules stay small:
one over 300 lines says why in its docstring ("over 300 lines because ...")."""

from __future__ import annotations

import ast
import importlib
import re

import pytest

from tests.distributed_helpers import REPO_ROOT

DOC = REPO_ROOT / "docs" / "architecture.md"
NAMED = sorted(set(re.findall(r"`((?:harness|accelerate_core)/[A-Za-z0-9_/]+(?:\.py)?/?)`",
                              DOC.read_text(encoding="utf-8"))))
MAX_LINES = 300


def test_the_doc_names_the_layout() -> None:
    assert len(NAMED) > 40, NAMED  # the flow names one module per step


@pytest.mark.parametrize("named", NAMED)
def test_every_path_the_doc_names_exists_and_imports(named: str) -> None:
    path = REPO_ROOT / named
    assert path.exists(), f"docs/architecture.md names {named}, which is not in the repository"
    if path.suffix == ".py":
        module = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
        importlib.import_module(module.removesuffix(".__init__"))


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "harness").rglob("*.py")), ids=lambda p: str(p.name))
def test_a_long_harness_module_says_why(path: object) -> None:
    from pathlib import Path

    assert isinstance(path, Path)
    text = path.read_text(encoding="utf-8")
    if len(text.splitlines()) <= MAX_LINES:
        return
    docstring = ast.get_docstring(ast.parse(text)) or ""
    assert f"over {MAX_LINES} lines because" in docstring.lower(), (
        f"{path.relative_to(REPO_ROOT)}: {len(text.splitlines())} lines; split it by responsibility, "
        f"or say in its docstring why it is one piece (\"Over {MAX_LINES} lines because ...\")")
