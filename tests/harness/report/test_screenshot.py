"""report.html as a browser draws it: headless Chromium's screenshot of a full-matrix report at a
fixed window (benchmarks/screenshot_report.py), measured from its pixels, so that a layout
regression shows. Skipped where no Chromium is installed (`apt-get install -y chromium`).

The page's CSS gives the near-miss box and the folded column colours nothing else uses
(harness/report/html_parts.py); the test finds them by exact colour. At 1000 px the unfolded
grid (40 columns) would run past the window's right edge; folded, it fits.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from harness.judge.outcome import Status
from harness.report import write_reports
from harness.report.html_parts import COLOUR, FOLD_BACKGROUND, NEAR_MISS_BACKGROUND, NEAR_MISS_EDGE
from tests.harness.report.full_matrix import ENVIRONMENT, TASKS, full_matrix
from tests.harness.report.png import read_png
from tests.run_if import run_if, screenshot_script

WIDTH, HEIGHT = 1000, 900
MARGIN = 16  # the body's right margin is 24 px (1.5em): nothing may be drawn in its last 16
ROW_PX = 20  # a grid row is a 22 px square and its border


def _rgb(colour: str) -> np.ndarray:
    return np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.uint8)


def _box(image: np.ndarray, colour: str) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of the pixels of exactly `colour`; fails when there is none."""
    ys, xs = np.nonzero(np.all(image == _rgb(colour), axis=2))
    assert len(xs), f"nothing drawn in {colour}"
    return int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())


def _has_text(image: np.ndarray, box: tuple[int, int, int, int]) -> bool:
    left, top, right, bottom = box
    return bool((image[top : bottom + 1, left : right + 1].max(axis=2) < 128).sum() > 30)


@run_if(chromium=True)
def test_report_html_renders_the_folded_grid_and_the_near_misses_within_the_window(tmp_path: Path) -> None:
    script = screenshot_script()
    write_reports(full_matrix(), ENVIRONMENT, tmp_path / "report")
    started = time.monotonic()
    png = tmp_path / "page.png"
    assert script.main([str(tmp_path / "report"), str(png), "--window-size", f"{WIDTH},{HEIGHT}"]) == 0
    image = read_png(png)
    assert time.monotonic() - started < 30, "a screenshot takes a few seconds"
    assert image.shape == (HEIGHT, WIDTH, 3)

    ink = image.min(axis=2) < 240
    assert ink.mean() > 0.05, "the page is not blank"
    near = _box(image, NEAR_MISS_BACKGROUND)
    fold = _box(image, FOLD_BACKGROUND)

    # The near misses sit above the grid, with their text, behind their coloured edge.
    assert near[3] < fold[1] and _has_text(image, near)
    edge = _box(image, NEAR_MISS_EDGE)
    assert edge[2] <= near[0] and edge[3] - edge[1] >= 20

    # One folded column spanning every task's row, its label drawn, right of the CPU squares
    # (126 passed cells: green squares of about 21 x 21 px, all left of it).
    assert fold[3] - fold[1] >= len(TASKS) * ROW_PX and fold[2] - fold[0] >= 80 and _has_text(image, fold)
    band = np.all(image[fold[1] : fold[3] + 1] == _rgb(COLOUR[Status.PASSED]), axis=2)
    assert band.sum() > 100 * 400 and np.nonzero(band)[1].max() < fold[0]

    # Width: nothing runs into the right margin (an overflowing grid would be cut there).
    assert not ink[:, WIDTH - MARGIN :].any(), "something runs past the window's right edge"
