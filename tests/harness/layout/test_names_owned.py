"""Each file name of the launch directory and of the report folder is spelled in its layout
module only (harness/layout/): anywhere else in the harness and the benchmark scripts a path is
asked of LaunchDir or ReportDir, so a name cannot drift between the side that writes a file and
the side that reads it.

Read from the source (ast): string constants, the constant parts of f-strings, and the operands
of `path / "name"`; docstrings and comments are prose and may name files."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.distributed_helpers import REPO_ROOT

LAYOUT = REPO_ROOT / "harness" / "layout"
# Names that are nothing but file names: found in any string of the code.
FILE_NAMES = {
    "launch_dir.py": ("plan.json", "launcher.log", "warm_up.json", ".started", ".finished", ".error.rank",
                      "rank*.log", "rank*.txt"),
    "report_dir.py": ("report.json", "report.md", "report.html", "junit.xml", "startup.json",
                      "behaviours.json", "version_status.json", "sweep_times.json", ".write-probe-"),
}
# Folder names that are also ordinary words ("status" is a report key): found as path parts only.
FOLDER_NAMES = {
    "launch_dir.py": ("pids", "logs", "stacks", "status"),
    "report_dir.py": ("records", "reruns", "checkpoints", "launches"),
}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    skip = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip]


def _path_operands(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and isinstance(side.value, str):
                    found.append((node.lineno, side.value))
    return found


def spellings(source: str) -> list[tuple[int, str]]:
    """(line, name) of every launch or report file name spelled in `source`."""
    tree = ast.parse(source)
    found = []
    for names in FILE_NAMES.values():
        for name in names:
            before = "" if name.startswith(".") else r"(?<![\w.-])"  # a suffix follows the cell id
            pattern = re.compile(before + re.escape(name) + r"(?![\w-])")
            found += [(line, name) for line, text in _strings(tree) if pattern.search(text)]
    for names in FOLDER_NAMES.values():
        for name in names:
            as_part = re.compile(rf"(?:^|/){name}/|/{name}$")
            found += [(line, name) for line, text in _strings(tree) if as_part.search(text)]
            found += [(line, name) for line, text in _path_operands(tree) if text.split("/")[0] == name]
    return sorted(set(found))


def _harness_modules() -> list[Path]:
    """The harness and the benchmark scripts (they read the same report folders)."""
    harness = (p for p in (REPO_ROOT / "harness").rglob("*.py") if p.parent != LAYOUT)
    return sorted([*harness, *(REPO_ROOT / "benchmarks").glob("*.py")])


@pytest.mark.parametrize("path", _harness_modules(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_module_outside_the_layouts_spells_a_launch_or_report_file_name(path: Path) -> None:
    assert spellings(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("module", sorted(FILE_NAMES))
def test_each_layout_module_spells_every_name_it_owns(module: str) -> None:
    found = {name for _, name in spellings((LAYOUT / module).read_text(encoding="utf-8"))}
    assert set(FILE_NAMES[module]) | set(FOLDER_NAMES[module]) <= found


def test_the_check_finds_a_spelled_name_and_leaves_prose_alone() -> None:
    source = '''"""Reads report.json and status/."""
def f(run_dir, cell_id, data):
    """Writes plan.json."""
    # records/ in a comment
    summary = data["status"]
    a = run_dir / "status" / f"{cell_id}.started"
    b = f"cat {run_dir}/report.md"
    c = run_dir / "records/x"
    return "its report.json cannot be read", a, b, c, summary
'''
    assert spellings(source) == [(6, ".started"), (6, "status"), (7, "report.md"), (8, "records"),
                                 (9, "report.json")]
