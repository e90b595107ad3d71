"""report.html reads in the order a reader wants (failures, passed with margins, skipped folded by
reason), and the loss curve's axes carry readable, "nice" tick labels."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from harness.judge.outcome import CellResult, Comparison, Status
from harness.plan.cell import Cell
from harness.report.html import render_html
from harness.report.svg import loss_curve_svg, nice_ticks, tick_label, tick_labels

ENV = {"name": "testenv", "python": "3.11", "torch": "2.13.0", "deepspeed": "not installed", "cpu_count": 2}
NO_GPU = "needs 2 CUDA devices, found 0"
NO_DS = "deepspeed is not installed"


def result(cell_id: str, status: Status, reason: str = "", **kw: object) -> CellResult:
    return CellResult(Cell.from_id(cell_id), status=status, reason=reason, **kw)  # type: ignore[arg-type]


def passed(cell_id: str, *shares: float) -> CellResult:
    comparisons = [
        Comparison(f"q{i}", True, 1e-6, 1e-6, 1e-5, 1e-3, tolerance_used=u) for i, u in enumerate(shares)
    ]
    return result(cell_id, Status.PASSED, comparisons=comparisons, duration_s=1.0)


def mixed() -> list[CellResult]:
    """A run's order: skipped cells interleaved with everything else, 50 of them, 2 reasons."""
    losses = {"losses": [1.0, 0.8, 0.7], "golden_losses": [1.0, 0.8, 0.6]}
    bad = Comparison("losses", False, 0.1, 0.2, 1e-5, 1e-3, first_divergence="step 2", tolerance_used=90.0)
    cells = [
        passed("t0-cpu1-single-fp32", 0.02, 0.12),  # margin 12% (its largest share)
        result("t0-cpu2-ddp-fp32", Status.FAILED, "losses left tolerance at step 2", comparisons=[bad],
               extra=losses),
        passed("t1-cpu1-single-fp32", 0.5),  # 50%: the closest passed cell, listed first
        result("t1-cpu2-ddp-fp32", Status.XFAILED, "declared: fp16 drifts", extra=losses),
        result("t2-cpu2-ddp-fp32", Status.CRASHED, "rank 1 died", detail="Traceback ... boom"),
        result("t3-cpu2-ddp-fp32", Status.XPASSED, "declared xfail, yet passed"),
        passed("t2-cpu1-single-fp32"),  # no comparison at all
        result("t4-cpu2-ddp-fp32", Status.ERROR, "golden missing"),
        result("t5-cpu2-ddp-fp32", Status.TIMEOUT, "no progress in 60 s"),
    ]
    for i in range(30):
        cells.insert(i % 9, result(f"g{i}-cuda2-ddp-fp32", Status.SKIPPED, NO_GPU))
    for i in range(20):
        cells.insert((2 * i) % 11, result(f"d{i}-cpu2-zero1-fp32", Status.SKIPPED, NO_DS))
    return cells


class _Outline(HTMLParser):
    """In document order: section headings (h2 ids), diagnosis blocks, passed rows, skip lines."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []
        self.ids: set[str] = set()
        self.links: list[str] = []
        self._in_summary = False
        self.summaries: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if values.get("id"):
            self.ids.add(values["id"])
        if tag == "h2":
            self.order.append("h2:" + values.get("id", ""))
        elif tag == "section":
            self.order.append("section:" + values["id"])
        elif tag == "tr" and values.get("id", "").startswith("cell-"):
            self.order.append("row:" + values["id"])
        elif tag == "details" and values.get("class") == "skip":
            self.order.append("skip")
        elif tag == "summary":
            self._in_summary = True
            self.summaries.append("")
        elif tag == "a" and values.get("href", "").startswith("#cell-"):
            self.links.append(values["href"][1:])

    def handle_endtag(self, tag: str) -> None:
        if tag == "summary":
            self._in_summary = False

    def handle_data(self, data: str) -> None:
        if self._in_summary:
            self.summaries[-1] += data


def test_html_lists_failures_then_passed_with_margins_then_skipped_folded_by_reason() -> None:
    results = mixed()
    page = render_html(results, ENV)
    outline = _Outline()
    outline.feed(page)
    headings = [item for item in outline.order if item.startswith("h2:")]
    assert headings == ["h2:failed", "h2:passed", "h2:xfailed", "h2:skipped"]
    sections = [item.split(":", 1)[1] for item in outline.order if item.startswith("section:")]
    # Failures worst first (crashed, timeout, error, failed, xpassed), then the declared xfail.
    assert sections == [
        "cell-t2-cpu2-ddp-fp32",
        "cell-t5-cpu2-ddp-fp32",
        "cell-t4-cpu2-ddp-fp32",
        "cell-t0-cpu2-ddp-fp32",
        "cell-t3-cpu2-ddp-fp32",
        "cell-t1-cpu2-ddp-fp32",
    ]
    # Every item sits under its heading: failures, passed rows, xfailed, skip lines, in that order.
    kinds = [
        "failed" if item in [f"section:{s}" for s in sections[:5]]
        else "xfailed" if item.startswith("section:")
        else "passed" if item.startswith("row:")
        else "skipped" if item == "skip"
        else item
        for item in outline.order
        if not item.startswith("h2:")
    ]
    assert kinds == ["failed"] * 5 + ["passed"] * 3 + ["xfailed"] + ["skipped"] * 2
    rows = [item.split(":", 1)[1] for item in outline.order if item.startswith("row:")]
    assert rows == ["cell-t1-cpu1-single-fp32", "cell-t0-cpu1-single-fp32", "cell-t2-cpu1-single-fp32"]
    passed_part = page[page.index('id="passed"') : page.index('id="xfailed"')]
    assert "50% of tolerance" in passed_part and "12% of tolerance" in passed_part
    assert "no comparison" in passed_part

    # No skipped cell has a diagnosis block (nor a "back to the grid" link of its own).
    skipped_ids = {f"cell-{r.id}" for r in results if r.status is Status.SKIPPED}
    assert len(skipped_ids) == 50
    assert not skipped_ids & set(sections) and not skipped_ids & set(rows)
    assert page.count("back to the grid") == len(sections) == 6
    # One collapsed line per reason, the most frequent first, with the count; the ids inside.
    skip_summaries = [s for s in outline.summaries if " skipped: " in s]
    assert skip_summaries == [f"30 skipped: {NO_GPU}", f"20 skipped: {NO_DS}"]
    assert "<details open" not in page
    folded = page[page.index('id="skipped"') :]
    for r in results:
        if r.status is Status.SKIPPED:
            assert f'id="cell-{r.id}"' in folded
    # The grid still links every cell to an element of the page.
    assert sorted(outline.links) == sorted(f"cell-{r.id}" for r in results)
    assert set(outline.links) <= outline.ids


def test_a_green_run_has_no_failed_section() -> None:
    page = render_html([passed("t0-cpu1-single-fp32", 0.3), passed("t1-cpu1-single-fp32", 2e-7)], ENV)
    assert 'id="failed"' not in page and 'id="passed"' in page and "30% of tolerance" in page
    assert "&lt;0.01% of tolerance" in page, "a tiny margin reads as a bound, not as 2e-05%"


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.008719, 0.07789, [0.02, 0.04, 0.06]),
        (0.0, 1.0, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (0.0087, 0.0503, [0.01, 0.02, 0.03, 0.04, 0.05]),
        (0.3, 0.45, [0.3, 0.35, 0.4, 0.45]),
        (1.2, 1.21, [1.2, 1.202, 1.204, 1.206, 1.208, 1.21]),
    ],
)
def test_nice_ticks_are_one_two_five_steps_inside_the_range(
    low: float, high: float, expected: list[float]
) -> None:
    assert nice_ticks(low, high) == expected


def test_nice_ticks_shrink_the_step_until_two_fit() -> None:
    # One tick per range asked for: 0.1 fits none of 0.11..0.19, 0.05 one, 0.02 four.
    assert nice_ticks(0.11, 0.19, target=1) == [0.12, 0.14, 0.16, 0.18]


def test_step_ticks_are_whole_and_several() -> None:
    assert nice_ticks(0, 7, integer=True) == [0, 2, 4, 6]
    assert nice_ticks(0, 1, integer=True) == [0, 1]
    assert nice_ticks(0, 99, integer=True) == [0, 20, 40, 60, 80]
    assert nice_ticks(0, 3, integer=True) == [0, 1, 2, 3]


def test_tick_labels_are_compact() -> None:
    assert tick_labels([0.02, 0.04, 0.06]) == ["0.02", "0.04", "0.06"]
    assert tick_labels([0.006, 0.008, 0.01, 0.012]) == ["0.006", "0.008", "0.01", "0.012"]
    assert tick_labels([0.0002, 0.0004, 0.0006]) == ["2e-4", "4e-4", "6e-4"]  # one style per axis
    assert tick_labels([1.2, 1.205, 1.21]) == ["1.2", "1.205", "1.21"]
    assert tick_labels([20000.0, 40000.0]) == ["2e4", "4e4"]
    assert tick_label(0.0087) == "8.7e-3" and tick_label(0.08) == "0.08" and tick_label(0) == "0"


def test_loss_curve_axes_have_nice_ticks_and_titles() -> None:
    run = [0.07789, 0.05, 0.031, 0.02, 0.015, 0.012, 0.01, 0.008719]
    golden = [0.07789, 0.049, 0.03, 0.0199, 0.0151, 0.0121, 0.0101, 0.0088]
    svg = loss_curve_svg(run, golden)
    root = ET.fromstring(svg)
    texts = [(el.get("class"), "".join(el.itertext())) for el in root.iter("{http://www.w3.org/2000/svg}text")]
    y = [t for c, t in texts if c == "ytick"]
    x = [t for c, t in texts if c == "xtick"]
    assert y == ["0.02", "0.04", "0.06", "0.08"]  # the plot pads the range by 5%: 0.0054..0.081
    assert x == ["0", "2", "4", "6"]
    labels = {t for _, t in texts}
    assert {"micro-step", "loss"} <= labels
    assert not re.search(r"0\.0778|0\.00871", " ".join(labels)), "no raw float as a label"
