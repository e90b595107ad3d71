"""Every catalog entry says which upstream report or documented behaviour it imitates.

An entry's `imitates` ends with its citation: a GitHub reference in the `owner/repo#N` form
(`huggingface/accelerate#3533`), a documented behaviour (`documented: <what>, "<passage>"`), or,
where a fair search found nothing, the honest `no upstream report found`. The checks run on the
catalog as it is (no launch), and on the catalog table in docs/sensitivity.md, which repeats them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.sensitivity.bug import Bug
from harness.sensitivity.catalog import CATALOG

# GitHub's rules: an owner is 1-39 letters, digits or single inner hyphens; a repository name is
# letters, digits, '.', '_' or '-'; an issue or pull request number has no leading zero.
_OWNER = r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}"
_REPO = r"[A-Za-z0-9._-]{1,100}"
REFERENCE = re.compile(rf"(?<![\w./-])({_OWNER})/({_REPO})#([1-9][0-9]*)(?![\w#])")
# Anything that looks like an issue number at all: each must be part of a well-formed reference.
NUMBER_SIGN = re.compile(r"#\d")
DOCUMENTED = re.compile(r'documented: [^"()]+"[^"]+"')
NONE_FOUND = "no upstream report found"

DOCS = Path(__file__).resolve().parents[3] / "docs" / "sensitivity.md"


def references(text: str) -> list[str]:
    return [match.group(0) for match in REFERENCE.finditer(text)]


def malformed_numbers(text: str) -> list[int]:
    """Offsets of '#<digit>' that no well-formed owner/repo#N reference covers."""
    covered = {match.end(2) for match in REFERENCE.finditer(text)}  # the '#' right after the repo
    return [match.start() for match in NUMBER_SIGN.finditer(text) if match.start() not in covered]


@pytest.mark.parametrize("bug", CATALOG, ids=lambda bug: bug.name)
def test_every_entry_names_what_it_imitates_or_says_none_was_found(bug: Bug) -> None:
    cited = references(bug.imitates) or DOCUMENTED.search(bug.imitates)
    assert cited or NONE_FOUND in bug.imitates, (
        f"{bug.name}: imitates names no upstream reference ({bug.imitates!r}). Fix: end it with "
        f"'(owner/repo#N)', '(documented: <page>, \"<passage>\")' or '({NONE_FOUND}; imitates the "
        "kind of bug)'")


@pytest.mark.parametrize("bug", CATALOG, ids=lambda bug: bug.name)
def test_issue_references_are_well_formed(bug: Bug) -> None:
    bad = malformed_numbers(bug.imitates)
    assert not bad, (f"{bug.name}: {[bug.imitates[max(0, i - 30):i + 8] for i in bad]} is not an "
                     "owner/repo#N reference. Fix: write the repository in front of the number")


@pytest.mark.parametrize(("text", "expected"), [
    ("(huggingface/accelerate#3533)", ["huggingface/accelerate#3533"]),
    ("x: deepspeedai/DeepSpeed#5718; Lightning-AI/pytorch-lightning#9771)",
     ["deepspeedai/DeepSpeed#5718", "Lightning-AI/pytorch-lightning#9771"]),
    ("(KempnerInstitute/KempnerForge#115: moments reset)", ["KempnerInstitute/KempnerForge#115"]),
    ("accelerate#3533", []),  # no owner
    ("-bad/repo#1", []),  # an owner cannot start with a hyphen
    ("owner/repo#0123", []),  # no leading zero
    ("owner/repo#12a", []),
])
def test_the_reference_pattern(text: str, expected: list[str]) -> None:
    assert references(text) == expected
    assert bool(malformed_numbers(text)) == (not expected and "#" in text)


def catalog_table(text: str) -> list[str]:
    """The rows of the docs' catalog table (the one headed entry | area | file | selection |
    imitates); the kill-matrix tables below it name entries too, with other columns."""
    lines = text.splitlines()
    start = lines.index("| entry | area | file | selection | imitates |") + 2
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def test_the_docs_table_carries_each_entrys_citations() -> None:
    rows = catalog_table(DOCS.read_text(encoding="utf-8"))
    table = {line.split(" | ")[0].strip("| `"): line for line in rows}
    missing = [bug.name for bug in CATALOG if bug.name not in table]
    assert not missing, f"docs/sensitivity.md's catalog table lacks {missing}"
    for bug in CATALOG:
        row = table[bug.name]
        absent = [ref for ref in references(bug.imitates) if ref not in row]
        assert not absent, f"{bug.name}: the docs table row does not cite {absent}"
        assert (NONE_FOUND in row) == (NONE_FOUND in bug.imitates), bug.name
