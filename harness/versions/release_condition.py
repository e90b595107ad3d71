"""A release condition on an `[[expected]]` entry: `accelerate_versions = "<1.2"`.

Some outcomes hold only for some releases of a dependency (Accelerate 1.0 raises where later
releases fall back to DDP). Such an entry names the releases it is about, as comparisons joined by
commas (`">=1.2, <1.5"`, `"==1.0.1"`), each an operator (`>=`, `<=`, `>`, `<`, `==`, `!=`) and a
release of two or three numbers; a release given with two numbers compares as X.Y.0. The entry
applies only where the installed release satisfies every comparison; elsewhere the next entry
that matches the cell decides (matrix.toml's rule: the first entry a cell matches is its
outcome). With the package not installed the entry applies nowhere (its cells are skipped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata

OPERATORS = (">=", "<=", "==", "!=", ">", "<")
_CLAUSE = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*(\d+)\.(\d+)(?:\.(\d+))?\s*")
_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
EXAMPLE = "'<1.2', '>=1.2, <1.5' or '==1.0.1'"


@dataclass(frozen=True)
class ReleaseCondition:
    text: str  # as written in matrix.toml
    clauses: tuple[tuple[str, tuple[int, int, int]], ...]

    def holds_for(self, release: str) -> bool:
        found = _RELEASE.match(release)  # "1.16.0", "1.10.1", "1.2.0.dev0": its numbers
        if found is None:
            return False
        version = (int(found[1]), int(found[2]), int(found[3] or 0))
        return all(_compare(version, op, bound) for op, bound in self.clauses)


def _compare(version: tuple[int, int, int], op: str, bound: tuple[int, int, int]) -> bool:
    return {">=": version >= bound, "<=": version <= bound, "==": version == bound,
            "!=": version != bound, ">": version > bound, "<": version < bound}[op]


def parse_condition(text: object) -> ReleaseCondition:
    """ValueError (what is wrong, in one phrase) unless `text` is a condition as described above."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("it must be a non-empty string of comparisons")
    clauses = []
    for part in text.split(","):
        found = _CLAUSE.fullmatch(part)
        if found is None:
            raise ValueError(f"{part.strip()!r} is not an operator ({', '.join(OPERATORS)}) and a release")
        clauses.append((found[1], (int(found[2]), int(found[3]), int(found[4] or 0))))
    return ReleaseCondition(text.strip(), tuple(clauses))


def installed_release(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def holds_here(condition: ReleaseCondition | None, package: str = "accelerate") -> bool:
    """No condition: always; else whether the release of `package` installed here satisfies it."""
    if condition is None:
        return True
    release = installed_release(package)
    return release is not None and condition.holds_for(release)
