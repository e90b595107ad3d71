"""One catalog entry: a realistic bug as a search/replace patch on one source file of
accelerate_core, the cells that should expose it, and the real-world bug it imitates.

A patch is applied to a temporary copy of the core, never to the repository's. The search text
must occur exactly once in the file as it is today: the core changes under the catalog (the
checkpoint code is being rewritten as this is written), and a patch that no longer applies is a
catalog error to fix, never a catch.
"""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path

AREAS = ("ddp", "sharding", "loss_scaling", "autocast", "accumulation", "clipping", "zero",
         "state_dict", "deepspeed_config", "checkpoint", "precision_fallback", "fsdp", "scheduling")


class CatalogError(Exception):
    """The entry cannot be tried as written (its patch does not apply, its selection ran no
    cell here, or the launched cells did not run the patched copy)."""


@dataclass(frozen=True)
class Bug:
    name: str
    area: str
    file: str  # relative to the accelerate_core package, e.g. "strategies/ddp.py"
    search: str
    replace: str
    select: str  # the -k expression of the smallest selection that should expose it
    imitates: str  # the real-world bug (an issue number or the kind of bug)
    # The -k expression of every CPU cell whose code path the patch touches (the kill matrix,
    # harness/sensitivity/kill.py); empty: the same cells as `select`.
    affects: str = ""

    @property
    def affected(self) -> str:
        return self.affects or self.select

    def __post_init__(self) -> None:
        if self.area not in AREAS:
            raise ValueError(f"bug {self.name!r}: area {self.area!r} is not one of {AREAS}")
        if self.search == self.replace:
            raise ValueError(f"bug {self.name!r}: the replacement equals the search text")


def core_source() -> Path:
    """The accelerate_core package the harness itself imports (the one to copy)."""
    # Found, not imported: only harness.rank imports the core (tests/test_import_graph.py).
    spec = importlib.util.find_spec("accelerate_core")
    if spec is None or spec.origin is None:
        raise CatalogError("accelerate_core is not importable here; install the project first")
    return Path(spec.origin).resolve().parent


def core_copy(workdir: Path) -> Path:
    """Copy the core, unpatched, into `workdir/accelerate_core`; return `workdir` (the control
    run's core: the same copying and the same path order as a patched trial, no patch)."""
    target = workdir / "accelerate_core"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(core_source(), target, ignore=shutil.ignore_patterns("__pycache__"))
    return workdir


def _excerpt(text: str, limit: int = 120) -> str:
    """The search text as a Python literal, cut after `limit` characters (entries span lines)."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[:limit] + "...'"


def patched_copy(bug: Bug, workdir: Path) -> Path:
    """Copy the core into `workdir/accelerate_core`, apply `bug`, return `workdir` (the directory
    to put first on the path of the launched cells)."""
    target = core_copy(workdir) / "accelerate_core"
    source = target / bug.file
    if not source.is_file():
        raise CatalogError(f"{bug.name}: accelerate_core/{bug.file} does not exist (moved or renamed?)")
    text = source.read_text(encoding="utf-8")
    count = text.count(bug.search)
    if count != 1:
        where = "no longer occurs" if count == 0 else f"occurs {count} times"
        raise CatalogError(f"{bug.name}: the patch's search text {_excerpt(bug.search)} {where} in "
                           f"accelerate_core/{bug.file} (the core changed under it); rewrite the entry "
                           "against the current code")
    patched = text.replace(bug.search, bug.replace)
    try:  # a patch that does not even compile would "fail" every cell: that is no catch
        compile(patched, str(source), "exec")
    except SyntaxError as exc:
        raise CatalogError(f"{bug.name}: the patched accelerate_core/{bug.file} does not compile "
                           f"({exc})") from None
    source.write_text(patched, encoding="utf-8")
    return workdir
