"""The grid folds the columns in which every cell was skipped for one cause into one labelled
column, in report.md and report.html, and keeps the full grid one click away."""

from __future__ import annotations

from html.parser import HTMLParser

from harness.judge.outcome import CellResult, Status
from harness.plan.availability import check
from harness.plan.cell import Cell
from harness.report.grid import Grid
from harness.report.grid_folds import fold, label, skip_kind
from harness.report.html import render_html
from harness.report.markdown import render_markdown
from tests.harness.report.full_matrix import CPU_HOST, ENVIRONMENT, NO_DEEPSPEED_HOST, PRECISIONS, full_matrix

CPU_COLUMNS = [f"{s}-{p}" for s in ("cpu1-single", "cpu2-ddp", "cpu2-zero1", "cpu2-zero2", "cpu2-zero3")
               for p in PRECISIONS]
CUDA_FOLD = "cuda1, cuda2: 240 cells skipped, no CUDA device"


def result(cell_id: str, status: Status, reason: str = "") -> CellResult:
    return CellResult(Cell.from_id(cell_id), status=status, reason=reason)


def test_skip_kind_names_the_cause_of_availability_reasons() -> None:
    """The fold keys on the wording of harness/plan/availability.py: pinned against check()."""
    one, two = (check(Cell.from_id(f"mlp-cuda{n}-zero1-bf16"), CPU_HOST).reason for n in (1, 2))
    assert (one, two) == ("needs 1 CUDA device, found 0", "needs 2 CUDA devices, found 0")
    assert skip_kind(one) == skip_kind(two) == "no CUDA device"
    assert skip_kind("needs 2 CUDA devices, found 1") == "needs 2 CUDA devices, found 1"  # another cause
    assert skip_kind("") == "no reason given"


def test_a_cpu_machine_folds_the_24_cuda_columns_into_one() -> None:
    folded = fold(Grid.of(full_matrix()))
    assert folded.shown == CPU_COLUMNS
    assert [f.text for f in folded.folds] == [CUDA_FOLD]
    assert len(folded.folds[0].columns) == 24


def test_without_deepspeed_the_zero_columns_fold_apart_from_the_cuda_ones() -> None:
    folded = fold(Grid.of(full_matrix(NO_DEEPSPEED_HOST, environment="nodeepspeed")))
    assert folded.shown == CPU_COLUMNS[:6]
    zero, cuda = folded.folds
    assert zero.label == "cpu2-zero1, cpu2-zero2, cpu2-zero3" and zero.cells == 90
    assert zero.kind.startswith("deepspeed is not installed")
    assert cuda.text == CUDA_FOLD


def test_only_whole_columns_of_one_cause_fold_and_never_a_lone_one() -> None:
    no_gpu = "needs 2 CUDA devices, found 0"
    results = [
        result("a-cpu1-single-fp32", Status.PASSED),
        result("a-cuda2-ddp-fp32", Status.SKIPPED, no_gpu),  # a lone column: stays
        result("a-cpu2-zero1-fp32", Status.SKIPPED, "x"),
        result("b-cpu2-zero1-fp32", Status.PASSED),  # one cell ran: the column stays
        result("a-cpu2-zero2-fp32", Status.SKIPPED, "x"),
        result("b-cpu2-zero2-fp32", Status.SKIPPED, "y"),  # two causes: stays
    ]
    folded = fold(Grid.of(results))
    assert folded.folds == [] and folded.shown == Grid.of(results).columns


def test_a_fold_is_named_by_the_shortest_whole_prefix() -> None:
    columns = [f"cpu2-zero1-{p}" for p in PRECISIONS] + ["cpu2-zero2-fp32", "cpu2-zero2-bf16"]
    assert label(("cpu2-zero1-fp32", "cpu2-zero1-fp16", "cpu2-zero1-bf16"), columns) == "cpu2-zero1"
    assert label(("cpu2-zero2-fp32", "cpu2-zero2-bf16"), columns) == "cpu2-zero2"
    assert label(("cpu2-zero1-fp32", "cpu2-zero2-fp32"), columns) == "cpu2-zero1-fp32, cpu2-zero2-fp32"
    assert label(tuple(columns), columns) == "cpu2"


def test_markdown_shows_the_folded_grid_and_the_full_one_in_details() -> None:
    text = render_markdown(full_matrix(), ENVIRONMENT)
    grid = text[text.index("### Grid") : text.index("<details><summary>Full grid")]
    header = next(line for line in grid.splitlines() if line.startswith("| task |"))
    assert header.count(" | ") == 16 and header.endswith("| cuda1,<br>cuda2 |")  # 15 CPU columns + the fold
    assert "| cpu2<br>zero3<br>bf16 |" in header  # stacked: as narrow as "zero3"
    assert "| batchnorm_sync | ✅ | ✅ | ✅ | ✅ | ✅ | ✅ |" in grid and grid.count("| ⏭️ |") == 10
    assert "- **cuda1, cuda2** (24 configurations): 240 cells skipped, no CUDA device" in grid
    full = text[text.index("<details><summary>Full grid: all 39 configurations</summary>") :]
    full = full[: full.index("</details>")]
    full_header = next(line for line in full.splitlines() if line.startswith("| task |"))
    assert full_header.count(" | ") == 39 and "cuda2<br>zero3<br>bf16" in full_header
    assert all(line.count("⏭️") == 24 for line in full.splitlines() if line.startswith("| regression |"))


class _Grids(HTMLParser):
    """Per <table>: whether it sits in a <details>, its links, its folded cells' text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict[str, object]] = []
        self._details = 0
        self._fold: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "details":
            self._details += 1
        elif tag == "table":
            self.tables.append({"folded": self._details > 0, "links": [], "folds": []})
        elif tag == "a" and values.get("href", "").startswith("#") and self.tables:
            self.tables[-1]["links"].append(values["href"][1:])  # type: ignore[union-attr]
        elif tag == "td" and values.get("class") == "fold":
            self._fold = [values["rowspan"]]

    def handle_endtag(self, tag: str) -> None:
        if tag == "details":
            self._details -= 1
        elif tag == "td" and self._fold is not None:
            self.tables[-1]["folds"].append(" ".join(self._fold))  # type: ignore[union-attr]
            self._fold = None

    def handle_data(self, data: str) -> None:
        if self._fold is not None and data.strip():
            self._fold.append(data.strip())


def test_html_shows_one_fold_cell_spanning_every_row_and_the_full_grid_collapsed() -> None:
    results = full_matrix()
    page = render_html(results, ENVIRONMENT)
    parser = _Grids()
    parser.feed(page)
    grid, full = parser.tables[0], parser.tables[1]
    assert grid["folded"] is False and full["folded"] is True
    assert grid["folds"] == ["10 240 cells skipped: no CUDA device"]  # rowspan 10: every task
    assert "skipped" in grid["links"]  # the fold links to the Skipped section
    assert sorted(full["links"]) == sorted(f"cell-{r.id}" for r in results)  # every cell, one click away
    cuda = {f"cell-{r.id}" for r in results if r.device == "cuda"}
    assert not cuda & set(grid["links"])  # type: ignore[arg-type]
    assert "24 configurations in which every cell was skipped for one cause are folded into 1 column" in page
