"""The project's import graph has no cycles: every module of accelerate_core and harness, with
imports inside functions counted too (a lazy import that closes a loop is still a loop), and
`if TYPE_CHECKING:` imports counted as well: they never run, but a type-only cycle still ties two
modules into one design (neither can be read, tested or moved without the other). And the
layering the design rests on: the core never imports the harness; the goldens' side imports
nothing of the core."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from tests.distributed_helpers import REPO_ROOT

PACKAGES = ("accelerate_core", "harness")

# Type-only imports allowed to close a cycle, as (importer, imported) edges: none since the
# harness/run refactor gave confirm.py and resume_launches.py the shared RunContext instead of the runner's
# private _Run. Nothing may be added here.
KNOWN_TYPE_ONLY_CYCLE_EDGES: frozenset[tuple[str, str]] = frozenset()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in (REPO_ROOT / package).rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path, name: str, known: set[str], type_only: bool = True) -> set[str]:
    """The project modules `name` imports; `type_only=False` leaves `if TYPE_CHECKING:` imports out
    (to tell which edges exist only for type checkers)."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_only:
            for sub in node.orelse:  # the branch that does run (its statements themselves)
                visit(sub)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # submodules
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    # Importing a.b.c first runs a/b/__init__.py: a package of another branch is an import too
    # (its __init__ may import back). The module's own packages are left out: they are running.
    own = {name.rsplit(".", depth)[0] for depth in range(1, name.count(".") + 1)}
    found |= {m.rsplit(".", depth)[0] for m in set(found) for depth in range(1, m.count(".") + 1)} - own
    return {m for m in found if m in known and m != name}


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Every import, type-only ones included."""
    modules = _modules()
    return {name: _imports(path, name, set(modules)) for name, path in modules.items()}


@functools.cache
def _type_only_edges() -> frozenset[tuple[str, str]]:
    modules = _modules()
    graph = _graph()
    return frozenset((name, target) for name, path in modules.items()
                     for target in graph[name] - _imports(path, name, set(modules), type_only=False))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_graph_sees_real_imports() -> None:
    graph = _graph()
    assert "harness.plan.cell" in graph["harness.plan.matrix"]  # a module-level import
    assert "harness.rank.loop" in graph["harness.rank.worker"]  # an import inside a function


def test_no_import_cycles() -> None:
    graph = {name: {t for t in targets if (name, t) not in KNOWN_TYPE_ONLY_CYCLE_EDGES}
             for name, targets in _graph().items()}
    assert _cycles(graph) == []


def test_type_only_imports_are_counted() -> None:
    # strategies/base.py names ProcessState for type checkers only.
    assert ("accelerate_core.strategies.base", "accelerate_core.state") in _type_only_edges()
    assert "accelerate_core.state" in _graph()["accelerate_core.strategies.base"]


def test_the_known_exceptions_are_type_only_and_still_there() -> None:
    # An exception whose import was removed, or became a real import, leaves this set.
    assert _type_only_edges() >= KNOWN_TYPE_ONLY_CYCLE_EDGES


def test_the_core_has_no_cycle_at_all() -> None:
    core = {name: {t for t in targets if t.startswith("accelerate_core")}
            for name, targets in _graph().items() if name.startswith("accelerate_core")}
    assert _cycles(core) == []


def test_a_cycle_would_be_found() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", sorted(m for m in _modules() if m.startswith("accelerate_core")))
def test_the_core_never_imports_the_harness(module: str) -> None:
    assert not {m for m in _graph()[module] if m.startswith("harness")}


def test_importing_a_submodule_counts_its_package_but_not_the_importers_own(tmp_path: Path) -> None:
    # harness.report's __init__ imported (through its writer) the module importing from it.
    path = tmp_path / "table.py"
    path.write_text("from harness.report.record_changes import line\nfrom harness.versions.status import x\n")
    known = {"harness", "harness.report", "harness.report.record_changes", "harness.versions",
             "harness.versions.status"}
    found = _imports(path, "harness.versions.table", known)
    assert found == {"harness.report", "harness.report.record_changes", "harness.versions.status"}


def test_a_type_only_import_is_an_edge_unless_asked_otherwise(tmp_path: Path) -> None:
    path = tmp_path / "a.py"
    path.write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg.b import B\n"
                    "else:\n    import pkg.c\n")
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c"}
    assert _imports(path, "pkg.a", known) == {"pkg.b", "pkg.c"}
    assert _imports(path, "pkg.a", known, type_only=False) == {"pkg.c"}
