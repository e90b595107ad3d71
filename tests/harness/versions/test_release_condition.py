"""`accelerate_versions` on [[expected]]: a release condition, validated at load, that makes an
entry hold only where the installed accelerate satisfies it (else the next entry decides)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from harness.errors import MatrixError
from harness.plan.matrix import load_matrix
from harness.versions.release_condition import holds_here, parse_condition
from tests.distributed_helpers import REPO_ROOT
from tests.harness.runner_helpers import write_matrix_file


@pytest.mark.parametrize(("text", "release", "holds"), [
    ("<1.8", "1.0.1", True), ("<1.8", "1.8.0", False), ("<1.8", "1.16.0", False),
    (">=1.2, <1.5", "1.4.9", True), (">=1.2, <1.5", "1.5.0", False), (">=1.2, <1.5", "1.1.0", False),
    ("==1.0.1", "1.0.1", True), ("!=1.0.1", "1.0.1", False), (">1.15", "1.16.0", True),
    ("<=1.15", "1.15.0", True), ("<1.8", "1.7.0.dev0", True), ("<1.8", "not a release", False),
])
def test_a_condition_compares_releases_by_their_numbers(text: str, release: str, holds: bool) -> None:
    assert parse_condition(text).holds_for(release) is holds


@pytest.mark.parametrize(("text", "why"), [
    ("", "non-empty string"), (1.8, "non-empty string"), ("1.8", "'1.8' is not an operator"),
    ("~=1.8", "'~=1.8' is not an operator"), ("<1.8,", "'' is not an operator"), ("<one", "'<one'"),
])
def test_a_malformed_condition_says_what_is_wrong(text: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_condition(text)


def test_it_holds_by_the_installed_release(monkeypatch: pytest.MonkeyPatch) -> None:
    condition = parse_condition("<1.8")
    monkeypatch.setattr(metadata, "version", lambda package: "1.0.1")
    assert holds_here(condition) and holds_here(None)

    def absent(package: str) -> str:
        raise metadata.PackageNotFoundError(package)

    monkeypatch.setattr(metadata, "version", absent)
    assert not holds_here(condition) and holds_here(None)


def test_an_entry_with_a_condition_decides_only_on_its_releases(monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = load_matrix()
    cell = next(c for c in matrix.cells if c.id == "lm-cpu2-zero3-fp32-accelerate")
    monkeypatch.setattr(metadata, "version", lambda package: "1.0.1")
    old = matrix.expected_outcome(cell)
    monkeypatch.setattr(metadata, "version", lambda package: "1.16.0")
    new = matrix.expected_outcome(cell)
    assert old is not None and old.accelerate_versions is not None and old.accelerate_versions.text == "<1.8"
    assert old.status == "exception" and "transformers" in old.reason
    assert new is not None and new.accelerate_versions is None and "MULTI_CPU" in new.reason


ENTRY = '''
[[expected]]
{implementation}strategy = "fsdp"
accelerate_versions = {condition}
status = "exception"
reason = "a release condition under test, with a reason long enough"
'''


def _load(tmp_path: Path, condition: str, implementation: str = 'implementation = "accelerate"\n') -> None:
    text = (REPO_ROOT / "matrix" / "matrix.toml").read_text(encoding="utf-8")
    first = text.index("\n[[expected]]\n") + 1  # put it first: its number is #1
    path = tmp_path / "matrix.toml"
    entry = ENTRY.format(implementation=implementation, condition=condition).lstrip()
    write_matrix_file(path, text[:first] + entry + "\n" + text[first:])
    load_matrix(path)


def test_a_malformed_condition_is_refused_at_load_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(MatrixError) as caught:
        _load(tmp_path, '"1.8"')
    message = str(caught.value)
    assert "[[expected]] #1.accelerate_versions = '1.8'" in message
    assert "not a release condition ('1.8' is not an operator" in message
    assert "Valid: comparisons joined by commas, e.g. '<1.2', '>=1.2, <1.5' or '==1.0.1'" in message
    assert 'Fix: write e.g. accelerate_versions = "<1.2"' in message


@pytest.mark.parametrize("implementation", ["", 'implementation = "core"\n',
                                            'implementation = ["core", "accelerate"]\n'])
def test_a_condition_on_an_entry_not_of_accelerate_s_cells_alone_is_refused(tmp_path: Path,
                                                                            implementation: str) -> None:
    with pytest.raises(MatrixError) as caught:
        _load(tmp_path, '"<1.8"', implementation)
    message = str(caught.value)
    assert "[[expected]] #1.accelerate_versions = '<1.8'" in message
    assert "needs an entry of Accelerate's cells alone" in message
    assert "Valid: implementation = 'accelerate' beside it" in message
    assert 'Fix: add implementation = "accelerate", or drop accelerate_versions' in message
