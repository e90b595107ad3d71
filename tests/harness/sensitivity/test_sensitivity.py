"""The harness's own detection rate (issue 14): the catalog's patches still apply to the core as it
is (cheap, no launch), and the fast subset is caught for real, each bug patched into a temporary
copy of the core and run through `python -m harness run`, after a control run of the same cells
unpatched:

DDP that never all-reduces fails on evidence (two processes: the ranks' gradients disagree).

One of the four `--fast` entries is what this needs: it takes the whole path (patched copy,
control, trial, the catch named by its evidence sentence) that every entry takes, on the
multi-process launch, where a patched copy's ranks must also be torn down. The other three (fp16
autocast off on one process; ZeRO-3 silently run as DDP; the fsdp plugin silently building DDP)
cost two launches each (their control and their trial) and add no path of their own here: their
evidence sentences are unit-tested (tests/harness/judge/test_evidence_check.py,
test_fsdp_evidence_check.py), and they run with the rest of the catalog in `python -m harness
sensitivity --fast` and the scheduled kill matrix (`nox -s sensitivity`, docs/sensitivity.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.sensitivity.bug import AREAS, Bug, CatalogError, core_source, patched_copy
from harness.sensitivity.catalog import CATALOG, FAST, by_name
from harness.sensitivity.trial import Control, control_run, try_bug


def test_the_catalog_has_twenty_realistic_bugs_covering_every_area() -> None:
    names = [bug.name for bug in CATALOG]
    assert len(names) >= 20 and len(set(names)) == len(names)
    covered = {bug.area for bug in CATALOG}
    assert covered == set(AREAS), f"areas without an entry: {set(AREAS) - covered}"
    assert all(bug.imitates and bug.select for bug in CATALOG)


@pytest.mark.parametrize("bug", CATALOG, ids=lambda bug: bug.name)
def test_every_patch_still_applies_to_the_core_as_it_is(bug: Bug, tmp_path: Path) -> None:
    """A patch whose search text drifted away is a catalog error to fix now, not a silent miss."""
    patched_copy(bug, tmp_path)
    changed = (tmp_path / "accelerate_core" / bug.file).read_text(encoding="utf-8")
    assert bug.replace in changed and changed != (core_source() / bug.file).read_text(encoding="utf-8")


def test_a_patch_that_no_longer_applies_is_a_catalog_error_never_a_catch(tmp_path: Path) -> None:
    stale = Bug(name="stale", area="checkpoint", file="ops.py", search="text the core never had",
                replace="x", select="regression-cpu1-single-fp32",
                imitates="a patch written against old code")
    with pytest.raises(CatalogError) as raised:
        patched_copy(stale, tmp_path)
    # The entry, the string that no longer matches, and the file it was looked for in.
    assert str(raised.value).startswith(
        "stale: the patch's search text 'text the core never had' no longer occurs in accelerate_core/ops.py")
    trial = try_bug(stale, timeout_s=60, control=Control({}, 0.0))
    assert trial.verdict == "catalog_error" and "no longer occurs" in trial.detail
    assert "'text the core never had'" in trial.detail


def test_a_patch_whose_search_text_occurs_twice_is_a_catalog_error_naming_a_long_string_cut(
        tmp_path: Path) -> None:
    """`import ` occurs several times in ops.py: the patch would be ambiguous."""
    long_search = "from __future__ import annotations\n" + "x" * 200
    twice = Bug(name="twice", area="checkpoint", file="ops.py", search="import ",
                replace="x", select="regression-cpu1-single-fp32", imitates="an ambiguous patch")
    count = (core_source() / "ops.py").read_text(encoding="utf-8").count("import ")
    assert count > 1
    ambiguous = rf"search text 'import ' occurs {count} times in accelerate_core/ops\.py"
    with pytest.raises(CatalogError, match=ambiguous):
        patched_copy(twice, tmp_path)
    long_one = Bug(name="long", area="checkpoint", file="ops.py", search=long_search, replace="x",
                   select="regression-cpu1-single-fp32", imitates="a patch written against old code")
    with pytest.raises(CatalogError) as raised:
        patched_copy(long_one, tmp_path)
    cut = repr(long_search)[:120] + "...'"
    assert f"search text {cut} no longer occurs in accelerate_core/ops.py" in str(raised.value)


def test_the_repository_core_is_never_patched(tmp_path: Path) -> None:
    bug = by_name(["fp16_autocast_off_on_cpu"])[0]
    before = (core_source() / bug.file).read_text(encoding="utf-8")
    patched_copy(bug, tmp_path)
    assert (core_source() / bug.file).read_text(encoding="utf-8") == before
    assert (tmp_path / "accelerate_core").resolve() != core_source()


# The fast subset's entry this module runs (see the docstring), with the evidence sentence it
# must fail with.
_EVIDENCE = {
    "ddp_never_syncs": "evidence: asked for ddp fp32 on cpu2, gradients were never all-reduced",
}
IN_PYTEST = tuple(_EVIDENCE)


def test_the_entry_run_here_is_of_the_fast_subset_on_several_processes() -> None:
    assert set(IN_PYTEST) <= set(FAST)
    shapes = {by_name([name])[0].select.split("-")[1] for name in IN_PYTEST}
    assert shapes == {"cpu2"}, shapes


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the control keeps its report (--keep-reports), given as a relative path."""
    return tmp_path_factory.mktemp("sensitivity-caller")


@pytest.fixture(scope="module")
def control(kept: Path) -> Control:
    """The entry's cell on an unpatched copy of the core, run as the trials run them: a
    catch counts only on a cell that passed here (harness.sensitivity.trial). Its report is kept
    under a path relative to the caller's directory, as `--keep-reports reports/sensitivity` is in
    the scheduled CI job."""
    bugs = by_name(IN_PYTEST)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(kept)
        return control_run(bugs, timeout_s=180, keep=Path("reports") / "sensitivity")


@pytest.mark.slow
def test_a_relative_keep_reports_path_is_the_callers_not_the_patched_copys(kept: Path,
                                                                          control: Control) -> None:
    """The run starts in the temporary copy of the core: a relative --keep-reports resolved there
    wrote the report into the copy, and the catalog stopped at its control ("wrote no report")."""
    assert control.statuses, control.line()
    assert (kept / "reports" / "sensitivity" / "control" / "report.json").is_file()


def test_a_cell_that_fails_unpatched_cannot_catch_a_bug(tmp_path: Path) -> None:
    """A cell that fails in the control proves nothing about a patch: a catalog error naming it."""
    bug = by_name(["fp16_autocast_off_on_cpu"])[0]
    failing_control = Control({bug.select: "failed"}, 0.0)
    trial = try_bug(bug, timeout_s=180, control=failing_control)
    assert trial.verdict == "catalog_error", trial.detail
    assert f"cell(s) {bug.select} did not pass in the control run (unpatched: failed)" in trial.detail


@pytest.mark.slow
@pytest.mark.parametrize("name", IN_PYTEST)
def test_the_fast_subset_is_caught(name: str, control: Control) -> None:
    assert control.statuses.get(by_name([name])[0].select) == "passed", control.line()
    trial = try_bug(by_name([name])[0], timeout_s=180, control=control)
    assert trial.verdict == "caught", trial.detail
    _cell, _, reason = trial.detail.partition(" failed: ")  # on what ran, before any number
    assert reason.startswith(_EVIDENCE[name]), trial.detail
