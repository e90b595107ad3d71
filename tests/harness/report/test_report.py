"""Reports: report.json schema, junit.xml, report.md, report.html (grid + curves), terminal output."""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser
from importlib import metadata
from pathlib import Path

import pytest

from harness.judge.outcome import CellResult, Comparison, Status
from harness.plan.cell import Cell
from harness.report import Progress, print_summary, write_reports
from harness.report import writer as writer_module
from harness.report.svg import loss_curve_svg
from harness.report.terminal import summary_rows
from harness.report.text import comparison_line
from harness.report.writer import ReportDirError

# Its outcome depends on whether deepspeed is installed: tests(nodeepspeed) runs it too.
pytestmark = pytest.mark.nodeepspeed

ENV = {"name": "testenv", "python": "3.11", "torch": "2.13.0", "deepspeed": "not installed", "cpu_count": 2}
CELL_KEYS = {"id", "task", "device", "strategy", "processes", "precision", "status", "reason", "duration_s"}
COMPARISON_KEYS = {"quantity", "ok", "max_abs_diff", "max_rel_diff", "atol", "rtol", "first_divergence"}


def result(cell_id: str, status: Status, reason: str = "", **kw: object) -> CellResult:
    return CellResult(Cell.from_id(cell_id), status=status, reason=reason, **kw)  # type: ignore[arg-type]


def sample() -> list[CellResult]:
    ok = Comparison("losses", True, 1e-7, 1e-7, 1e-5, 1.3e-6)
    bad = Comparison("losses", False, 0.25, 0.5, 1e-5, 1e-3, first_divergence="step 3", tolerance_used=250.0)
    return [
        result("mlp-cpu1-single-fp32", Status.PASSED, duration_s=1.5, comparisons=[ok]),
        result(
            "mlp-cpu2-zero3-fp16",
            Status.FAILED,
            "losses left tolerance at step 3 | see curve",
            comparisons=[ok, bad],
            emulated=True,
            detail="rank 1 said <b>hello</b>\x07",
            extra={"losses": [1.0, 0.8, 0.6, float("nan"), 0.2], "golden_losses": [1.0, 0.8, 0.6, 0.45, 0.3]},
        ),
        result("mlp-cuda2-ddp-bf16", Status.SKIPPED, 'needs 2 CUDA devices [pip install "x[deepspeed]"]'),
        result("lm-cpu2-ddp-fp16", Status.XFAILED, "declared: <script>alert(1)</script>"),
        result("lm-cpu2-zero1-bf16", Status.CRASHED, "rank 1 died", detail="Traceback ... boom"),
        result("lm-cpu2-zero2-bf16", Status.TIMEOUT, "no progress in 60 s"),
        result("lm-cpu1-single-fp32", Status.XPASSED, "declared xfail, yet passed"),
        result("lm-cpu2-zero3-fp32", Status.ERROR, "golden missing"),
    ]


def test_report_json_has_the_design_schema_and_counts(tmp_path: Path) -> None:
    results = sample()
    write_reports(results, ENV, tmp_path)
    data = json.loads((tmp_path / "report.json").read_text(), parse_constant=pytest.fail)
    assert {"summary", "environment", "cells"} <= set(data)
    assert data["summary"] == {s.value: Counter(r.status.value for r in results)[s.value] for s in Status}
    assert data["environment"] == ENV
    assert data["ok"] is False
    assert [c["id"] for c in data["cells"]] == [r.id for r in results]
    for cell in data["cells"]:
        assert set(cell) >= CELL_KEYS
        assert cell["status"] in {s.value for s in Status}
        for comparison in cell["comparisons"]:
            assert set(comparison) >= COMPARISON_KEYS
    # NaN is not JSON: it is written as a string, and the rest round-trips into CellResult.
    assert data["cells"][1]["extra"]["losses"][3] == "nan"
    back = [CellResult.from_json(c) for c in data["cells"]]
    assert [(b.id, b.status, b.reason, b.comparisons) for b in back] == [
        (r.id, r.status, r.reason, r.comparisons) for r in results
    ]


def test_all_passed_report_is_ok(tmp_path: Path) -> None:
    write_reports([result("mlp-cpu1-single-fp32", Status.PASSED)], ENV, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())["ok"] is True
    assert "Unexpected results" not in (tmp_path / "report.md").read_text()


def test_junit_maps_statuses_like_pytest(tmp_path: Path) -> None:
    write_reports(sample(), ENV, tmp_path)
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert list(cases) == [r.id for r in sample()]
    kinds = {name: [child.tag for child in case] for name, case in cases.items()}
    assert kinds["mlp-cpu1-single-fp32"] == []
    assert kinds["mlp-cpu2-zero3-fp16"] == ["failure"]
    assert kinds["lm-cpu1-single-fp32"] == ["failure"]  # xpassed is strict, as in pytest
    assert kinds["mlp-cuda2-ddp-bf16"] == kinds["lm-cpu2-ddp-fp16"] == ["skipped"]
    for name in ("lm-cpu2-zero1-bf16", "lm-cpu2-zero2-bf16", "lm-cpu2-zero3-fp32"):
        assert kinds[name] == ["error"]
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "8",
        "2",
        "3",
        "2",
    )
    failure = cases["mlp-cpu2-zero3-fp16"].find("failure")
    assert failure is not None and failure.text is not None
    assert "first diverged at step 3" in failure.text and "emulation" in failure.text


def test_markdown_lists_problems_first_and_escapes_tables(tmp_path: Path) -> None:
    write_reports(sample(), ENV, tmp_path)
    text = (tmp_path / "report.md").read_text()
    problems = text[text.index("### Unexpected results") : text.index("### Grid")]
    for r in sample():
        assert (f"`{r.id}`" in problems) == r.status.is_unexpected_failure
    assert "at step 3 \\| see curve" in problems  # a '|' in a reason must not split the table
    assert problems.index("lm-cpu2-zero1-bf16") < problems.index("mlp-cpu2-zero3-fp16")  # crashed first
    grid = text[text.index("### Grid") :]
    assert "| mlp | ✅ |" in grid


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.tags: Counter[str] = Counter()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "a" and values.get("href", "").startswith("#cell-"):  # type: ignore[union-attr]
            self.links.append(str(values["href"])[1:])


def test_html_grid_links_every_cell_to_its_diagnosis(tmp_path: Path) -> None:
    results = sample()
    write_reports(results, ENV, tmp_path)
    page = (tmp_path / "report.html").read_text()
    parser = _Collect()
    parser.feed(page)
    assert sorted(parser.links) == sorted(f"cell-{r.id}" for r in results)
    assert set(parser.links) <= parser.ids
    assert "<script>" not in page and "&lt;script&gt;" in page  # reasons are escaped
    # One curve: the failed cell with losses; cells without losses draw none.
    assert parser.tags["svg"] == 1
    section = page[page.index('id="cell-mlp-cpu2-zero3-fp16"') :]
    assert section.index("<svg") < section.index("</section>")
    assert "emulated fp16" in section


def test_loss_curve_breaks_at_nan_and_spans_the_plot() -> None:
    svg = loss_curve_svg([2.0, 1.0, float("nan"), 0.0], [2.0, 1.0, 0.5, 0.0])
    assert ET.fromstring(svg).tag == "{http://www.w3.org/2000/svg}svg"  # well-formed, inline-able
    lines = [part.split('points="')[1].split('"')[0] for part in svg.split("<polyline")[1:]]
    golden, *run_segments = lines
    assert len(run_segments) == 2, "the NaN step leaves a gap in the run's line"
    ys = [float(point.split(",")[1]) for point in golden.split()]
    assert ys[0] == min(ys) and ys[-1] == max(ys)  # the highest loss sits at the top (SVG y grows down)
    assert "step 2: nan" in svg


def test_failed_render_leaves_previous_report_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_reports(sample(), ENV, tmp_path)
    before = (tmp_path / "report.json").read_text()

    def broken(results: object, environment: object) -> str:
        raise RuntimeError("renderer bug")

    monkeypatch.setitem(writer_module.REPORT_FILES, "report.html", broken)
    with pytest.raises(RuntimeError):
        write_reports(sample()[:1], ENV, tmp_path)
    assert (tmp_path / "report.json").read_text() == before
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["junit.xml", "report.html", "report.json", "report.md"], "no temporary file left"


def test_unwritable_report_dir_says_what_and_how(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(ReportDirError, match=r"report directory .* cannot be written.*Fix: pass another one"):
        write_reports(sample(), ENV, blocker / "sub")


def test_environment_info_reads_versions_without_importing_deepspeed() -> None:
    code = (
        "import sys, json; from harness.report import environment_info; "
        "info = environment_info('x'); print(json.dumps([info.to_json(), 'deepspeed' in sys.modules]))"
    )
    command = [sys.executable, "-c", code]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    info, imported = json.loads(out.stdout)
    assert imported is False
    try:
        expected = metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        expected = "not installed"
    assert info["deepspeed"] == expected and info["deepspeed_installed"] == (expected != "not installed")
    assert info["torch"] == metadata.version("torch") and info["name"] == "x"
    assert info["python"] == ".".join(map(str, sys.version_info[:3]))
    cpu = info["machine"]["cpu"]  # what decides numerics here (accelerate_core.machine)
    import torch

    assert cpu["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert cpu["native_fp16"] == bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    assert set(cpu["flags"]) == {"avx2", "avx512f", "avx512_fp16", "avx512_bf16", "amx_bf16"}
    assert info["machine"]["cuda"]["available"] == torch.cuda.is_available()


def test_progress_prints_plain_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(total=2, stream=stream)
    for r in sample()[:2]:
        progress.cell_started(r.id)
        progress.cell_finished(r)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[1/2]") and "passed mlp-cpu1-single-fp32" in lines[0]
    assert lines[1].startswith("[2/2]") and "failed" in lines[1] and "step 3" in lines[1]


def test_progress_disabled_is_silent_and_live_bar_reports_problems(monkeypatch: pytest.MonkeyPatch) -> None:
    quiet = io.StringIO()
    progress = Progress(total=1, enabled=False, stream=quiet)
    progress.cell_finished(sample()[0])
    progress.close()
    assert quiet.getvalue() == ""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("COLUMNS", "200")  # one line per message, whatever the real terminal
    terminal = Terminal()
    live = Progress(total=3, stream=terminal)
    assert live._bar is not None, "a terminal outside CI gets the live bar"
    for r in sample()[:3]:
        live.cell_started(r.id)
        live.cell_finished(r)
    live.close()
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.getvalue())  # without colour codes
    assert "mlp-cpu2-zero3-fp16" in shown and "3/3" in shown and 'install "x[deepspeed]"' in shown


def test_print_summary_lists_every_cell_and_the_headline() -> None:
    stream = io.StringIO()
    print_summary(sample(), stream=stream)
    text = stream.getvalue()
    for r in sample():
        assert r.id in text
    assert 'pip install "x[deepspeed]"' in text  # reasons are printed as text, never as markup
    counts = "1 passed, 1 failed, 1 skipped, 1 xfailed, 1 xpassed, 1 error, 1 timeout, 1 crashed"
    assert f"{counts} (8 cells)" in text


def test_reports_render_results_read_back_from_report_json(tmp_path: Path) -> None:
    """A NaN diff is written as "nan"; results loaded back (e.g. --resume) still render, and say
    that no diff was computed rather than print a "nan" for a value that does not exist."""
    nan_cell = result(
        "mlp-cpu1-single-fp32", Status.FAILED, "records differ between environments",
        comparisons=[Comparison("cross_environment", False, math.nan, math.nan, 0.0, 0.0, note="missing")],
    )  # fmt: skip
    write_reports([nan_cell], ENV, tmp_path / "first")
    data = json.loads((tmp_path / "first" / "report.json").read_text())
    assert data["cells"][0]["comparisons"][0]["max_abs_diff"] == "nan"
    back = [CellResult.from_json(c) for c in data["cells"]]
    write_reports(back, ENV, tmp_path / "second")
    junit = (tmp_path / "second" / "junit.xml").read_text()
    assert "FAIL cross_environment: no diff computed (atol=0, rtol=0) (missing)" in junit
    assert "nan" not in junit and "nan" not in (tmp_path / "second" / "report.md").read_text()


def test_summary_folds_many_passed_and_same_reason_skips_but_never_problems() -> None:
    passed = [result(f"t{i}-cpu1-single-fp32", Status.PASSED, duration_s=1.0) for i in range(5)]
    no_gpu = [
        result(f"t{i}-cuda2-ddp-fp32", Status.SKIPPED, "needs 2 CUDA devices, found 0") for i in range(4)
    ]
    no_ds = [result(f"t{i}-cpu2-zero1-fp32", Status.SKIPPED, "deepspeed is not installed") for i in range(2)]
    failed = [result(f"t{i}-cpu2-ddp-fp32", Status.FAILED, "losses diverged") for i in range(5)]
    rows = summary_rows(passed + no_gpu + no_ds + failed)
    assert [r.cell for r in rows[:5]] == [r.id for r in failed]  # problems: one row each, first
    assert [(r.cell, r.status) for r in rows[5:]] == [
        ("4 cells (t0-cuda2-ddp-fp32, ...)", Status.SKIPPED),
        ("t0-cpu2-zero1-fp32", Status.SKIPPED),
        ("t1-cpu2-zero1-fp32", Status.SKIPPED),
        ("5 cells (t0-cpu1-single-fp32, ...)", Status.PASSED),
    ]
    assert rows[-1].duration_s == 5.0
    assert len(summary_rows(passed + no_gpu + no_ds + failed, full=True)) == 16


def test_comparison_line_keeps_small_shares_of_the_tolerance_visible() -> None:
    line = comparison_line(Comparison("losses", True, 1e-4, 1e-5, 0.02, 1e-3, tolerance_used=0.0031))
    assert "0.31% of tolerance used" in line
    assert "25000% of tolerance used" in comparison_line(
        Comparison("losses", False, 0.25, 0.5, 1e-5, 1e-3, "step 3", tolerance_used=250.0)
    )


def test_the_run_environment_keeps_report_json_environment_keys_in_order() -> None:
    from harness.report import environment_info
    from harness.run.startup import StartupSummary

    environment = environment_info("x")
    base = ["name", "python", "python_executable", "platform", "machine", "hostname", "torch", "deepspeed",
            "deepspeed_installed", "accelerate_core", "accelerate", "ci", "cpu_count", "cuda_available",
            "cuda_device_count", "cuda_devices", "torch_cuda"]
    assert list(environment.to_json()) == base  # as the pytest items and script mode write it
    environment.shard = {"index": 1, "count": 2}
    environment.interrupted = "by SIGINT: 1 of 2 cells finished"
    environment.with_startup(None)  # `harness run` says its start-up even when nothing launched
    assert list(environment.to_json()) == [*base, "shard", "interrupted", "startup"]
    assert environment.to_json()["startup"] is None
    launch = {"launch": "cpu1-001", "cells": 1, "startup_s": 2.0, "warm_up_s": 1.5, "deepspeed_ops_s": None}
    environment.with_startup(StartupSummary([launch], {"wall_s": 3.0}))
    assert environment.to_json()["startup"] == {"launches": 1, "total_s": 2.0, "deepspeed_ops_s": None,
                                                "per_launch": [launch], "profile": {"wall_s": 3.0}}
