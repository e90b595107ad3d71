"""The kill matrix (harness/sensitivity/kill.py): each entry's affected cells, judged cell by cell
from a patched run's report against the control, without launching anything here (the runs it
judges are `python -m harness run` reports, tested where the runner is)."""

from __future__ import annotations

import pytest

from harness.plan.matrix import load_matrix
from harness.plan.selection import keyword_matches
from harness.sensitivity.bug import Bug
from harness.sensitivity.catalog import CATALOG, by_name
from harness.sensitivity.kill import KillRow, judge_cells, summary_lines
from harness.sensitivity.trial import Control

_BUG = Bug(name="toy", area="ddp", file="strategies/ddp.py", search="a", replace="b",
           select="regression-cpu2-ddp-fp32", affects="cpu2-ddp", imitates="a toy entry")


def _cell(cell_id: str, status: str, failure: str | None = None, used: float = 0.5) -> dict[str, object]:
    return {"id": cell_id, "status": status, "failure": failure, "reason": f"{cell_id} {status}",
            "comparisons": [{"quantity": "eval/logits", "tolerance_used": used, "max_abs_diff": 1e-6,
                             "atol": 1e-5, "rtol": 1.3e-6}]}


def test_each_cell_is_caught_missed_broken_or_not_counted() -> None:
    control = Control({"a-cpu2-ddp-fp32": "passed", "b-cpu2-ddp-fp32": "passed", "c-cpu2-ddp-fp32": "passed",
                       "d-cpu2-ddp-fp32": "passed", "e-cpu2-ddp-fp32": "xfailed"}, 1.0)
    report = {"cells": [
        _cell("a-cpu2-ddp-fp32", "failed", "divergence"),
        _cell("b-cpu2-ddp-fp32", "failed", "evidence"),
        _cell("c-cpu2-ddp-fp32", "passed", used=0.73),
        _cell("d-cpu2-ddp-fp32", "error", "exception"),
        _cell("e-cpu2-ddp-fp32", "failed", "divergence"),  # failed in the control too: proves nothing
        _cell("f-cuda2-ddp-fp32", "skipped"),
    ]}
    row = judge_cells(_BUG, report, control)
    assert row.caught == ["a-cpu2-ddp-fp32", "b-cpu2-ddp-fp32"]
    assert list(row.missed) == ["c-cpu2-ddp-fp32"]
    assert "eval/logits at 73% of tolerance" in row.missed["c-cpu2-ddp-fp32"]
    assert list(row.broke) == ["d-cpu2-ddp-fp32"] and row.unproven == ["e-cpu2-ddp-fp32"]
    assert row.affected == 4
    assert row.line().startswith("toy: caught in 2 of 4 affected cells (1 raised or crashed; 1 not counted")
    lines = summary_lines([row])
    assert any(line.startswith("kill matrix: 1 entries, caught in 2 of 4 affected cells; entries caught "
                               "nowhere: 0; subtle (caught, under 10x the tolerance wherever caught): 0")
               and line.endswith("missed nowhere (caught in every cell that did not raise): 0")
               for line in lines)
    assert any(line.startswith("  missed toy on c-cpu2-ddp-fp32; closest: c-cpu2-ddp-fp32: eval/logits")
               for line in lines)


def test_a_catch_keeps_its_effect_and_an_entry_is_subtle_only_under_10x_wherever_caught() -> None:
    control = Control({f"{t}-cpu2-ddp-fp32": "passed" for t in "abcd"}, 1.0)
    subtle = judge_cells(_BUG, {"cells": [_cell("a-cpu2-ddp-fp32", "failed", "divergence", used=3.25),
                                          _cell("b-cpu2-ddp-fp32", "failed", "divergence", used=9.5),
                                          _cell("c-cpu2-ddp-fp32", "passed", used=0.4)]}, control)
    assert subtle.effect == {"a-cpu2-ddp-fp32": 3.25, "b-cpu2-ddp-fp32": 9.5}
    assert subtle.subtle and subtle.largest_effect == 9.5
    assert "effect at most 9.5x the tolerance (subtle)" in subtle.line()
    assert subtle.to_json()["subtle"] is True and subtle.to_json()["effect"]["a-cpu2-ddp-fp32"] == 3.25
    # One strong catch makes the entry not subtle; evidence and a non-finite share ("inf" in
    # report.json) are infinite effects, never small ones.
    loud = judge_cells(_BUG, {"cells": [_cell("a-cpu2-ddp-fp32", "failed", "divergence", used=3.0),
                                        _cell("b-cpu2-ddp-fp32", "failed", "divergence", used=12.0)]},
                       control)
    assert not loud.subtle and "at most 12x the tolerance, under 10x in 1 of 2" in loud.line()
    assert loud.caught_within == 1 and loud.to_json()["caught_within_10x"] == 1
    evidence = judge_cells(_BUG, {"cells": [_cell("a-cpu2-ddp-fp32", "failed", "evidence", used=0.0)]},
                           control)
    unknown = judge_cells(_BUG, {"cells": [_cell("a-cpu2-ddp-fp32", "failed", "divergence", used="inf")]},
                          control)  # type: ignore[arg-type]
    # A loss scale off the golden's: an exact comparison (tolerance 0), whose share report.json
    # gives as difference / 1e-300; no multiple of a tolerance, so infinite, never 3e304x.
    scale = _cell("a-cpu2-ddp-fp32", "failed", "divergence", used=0.2)
    scale["comparisons"].append({"quantity": "loss_scales", "ok": False,  # type: ignore[attr-defined]
                                 "tolerance_used": 3.28e304, "atol": 0.0, "rtol": 0.0})
    exact = judge_cells(_BUG, {"cells": [scale]}, control)
    for row in (evidence, unknown, exact):
        assert row.largest_effect == float("inf") and not row.subtle
        assert "effect on evidence, shape or an exact comparison" in row.line()
        assert row.to_json()["effect"] == {"a-cpu2-ddp-fp32": None}
    assert not judge_cells(_BUG, {"cells": [_cell("a-cpu2-ddp-fp32", "passed")]}, control).subtle
    assert ("subtle (caught, under 10x the tolerance wherever caught): 1; caught within 10x in some cell: 2; "
            "missed nowhere (caught in every cell that did not raise): 1" in summary_lines([subtle, loud])[2])


def test_a_catch_by_the_exact_tier_alone_is_counted_apart() -> None:
    """Under `--exact` a cell inside every tolerance can fail on its `exact:` comparisons only; such
    catches are named apart from those a tolerance made, and count neither as small effects nor as
    large ones: an entry's subtlety is its tolerance catches' (one caught at 3x stays subtle)."""
    control = Control({f"{t}-cpu2-ddp-fp32": "passed" for t in "abc"}, 1.0)
    exact_only = _cell("a-cpu2-ddp-fp32", "failed", "divergence", used=0.4)
    exact_only["comparisons"] = [  # type: ignore[index]
        {"quantity": "eval/logits", "ok": True, "tolerance_used": 0.4},
        {"quantity": "exact:eval/logits", "ok": False, "tolerance_used": "inf"}]
    both = _cell("b-cpu2-ddp-fp32", "failed", "divergence", used=3.0)
    both["comparisons"] = [  # type: ignore[index]
        {"quantity": "eval/logits", "ok": False, "tolerance_used": 3.0},
        {"quantity": "exact:eval/logits", "ok": False, "tolerance_used": "inf"}]
    row = judge_cells(_BUG, {"cells": [exact_only, both, _cell("c-cpu2-ddp-fp32", "passed")]}, control)
    assert row.caught == ["a-cpu2-ddp-fp32", "b-cpu2-ddp-fp32"]
    assert row.exact_only == ["a-cpu2-ddp-fp32"]
    assert "1 by the exact tier alone" in row.line()
    assert row.to_json()["caught_by_exact_tier_alone"] == ["a-cpu2-ddp-fp32"]
    # its effect is how far inside the tolerances it stayed; the subtlety is the tolerance catch's
    assert row.effect == {"a-cpu2-ddp-fp32": 0.4, "b-cpu2-ddp-fp32": 3.0}
    assert row.tolerance_effects == [3.0] and row.largest_effect == 3.0 and row.caught_within == 1
    assert row.subtle and "at most 3x the tolerance (subtle)" in row.line()
    # caught by the exact tier alone: caught, yet no tolerance catch to call subtle or loud
    alone = judge_cells(_BUG, {"cells": [exact_only]}, control)
    assert alone.caught == ["a-cpu2-ddp-fp32"] and not alone.subtle and alone.caught_within == 0
    assert "at most" not in alone.line() and "1 by the exact tier alone" in alone.line()


def test_an_entry_caught_nowhere_is_counted_and_a_run_of_nothing_is_a_catalog_error() -> None:
    control = Control({"a-cpu2-ddp-fp32": "passed"}, 1.0)
    missed = judge_cells(_BUG, {"cells": [_cell("a-cpu2-ddp-fp32", "passed")]}, control)
    assert not missed.caught and not missed.error
    assert "entries caught nowhere: 1" in summary_lines([missed])[-2]
    nothing = judge_cells(_BUG, {"cells": [_cell("a-cuda2-ddp-fp32", "skipped")]}, control)
    assert nothing.error == "-k 'cpu2-ddp' ran no cell here"
    assert KillRow(_BUG, error="x").line() == "toy: CATALOG ERROR x"


def test_an_entry_without_affects_is_judged_on_its_selection() -> None:
    bug = Bug(name="toy", area="ddp", file="f.py", search="a", replace="b", select="x-cpu1-single-fp32",
              imitates="t")
    assert bug.affected == "x-cpu1-single-fp32"


@pytest.mark.parametrize("bug", [b for b in CATALOG if b.affects], ids=lambda b: b.name)
def test_the_affected_cells_hold_the_entrys_own_selection_and_are_cpu_cells(bug: Bug) -> None:
    """A kill row must include the cell its trial is caught on, and stays on CPU cells (a GPU cell
    would only be skipped here). Resume pairs count: the checkpoint entries' rows are resume cells."""
    matrix = load_matrix()
    cells = matrix.all_cells() + matrix.resume_cells
    selected = {c.id for c in cells if keyword_matches(c, bug.select)}
    affected = {c.id for c in cells if keyword_matches(c, bug.affects)}
    assert selected and selected <= affected, sorted(selected - affected)
    assert all(c.device == "cpu" for c in cells if c.id in affected)


def test_the_data_order_entries_touch_every_cpu_cell_of_the_shuffling_task() -> None:
    assert {b.affected for b in by_name(["shuffle_order_repeats_every_epoch",
                                         "shuffle_seeded_with_seed_plus_epoch"])} == {"shuffle and cpu"}
