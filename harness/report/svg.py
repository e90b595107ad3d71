"""A loss curve of a run drawn against its golden, as inline SVG (no JavaScript, no plotting lib).

Non-finite values (a NaN loss is a real outcome) break the line and are marked with a red tick
at the top of the plot, so a diverging run is visible, not silently dropped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT = 520, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 14, 34  # margins for axis labels


def _as_floats(values: Sequence[object]) -> list[float]:
    out: list[float] = []
    for value in values:
        try:
            out.append(float(value))  # type: ignore[arg-type]
        except (TypeError, ValueError):  # report.json writes NaN as the string "nan"
            out.append(math.nan)
    return out


def _segments(points: list[tuple[float, float | None]]) -> list[list[tuple[float, float]]]:
    """Split a series at missing points so a NaN step leaves a gap."""
    segments: list[list[tuple[float, float]]] = [[]]
    for x, y in points:
        if y is None:
            if segments[-1]:
                segments.append([])
        else:
            segments[-1].append((x, y))
    return [s for s in segments if s]


def loss_curve_svg(losses: Sequence[object], golden: Sequence[object], title: str = "") -> str:
    """SVG markup with the run's losses (solid) over the golden's (dashed), x = step."""
    run, gold = _as_floats(losses), _as_floats(golden)
    finite = [v for v in run + gold if math.isfinite(v)]
    steps = max(len(run), len(gold), 2)
    low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if high - low < 1e-12:  # a flat line still needs a visible range
        low, high = low - 0.5, high + 0.5
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(step: int) -> float:
        return LEFT + plot_w * step / (steps - 1)

    def sy(value: float) -> float:
        return TOP + plot_h * (1 - (value - low) / (high - low))

    def series(values: list[float]) -> list[tuple[float, float | None]]:
        return [(sx(i), sy(v) if math.isfinite(v) else None) for i, v in enumerate(values)]

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title or "loss curve")}">',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>',
        f'<text x="{LEFT - 6}" y="{TOP + 4}" text-anchor="end" font-size="10">{high:.4g}</text>',
        f'<text x="{LEFT - 6}" y="{TOP + plot_h}" text-anchor="end" font-size="10">{low:.4g}</text>',
        f'<text x="{LEFT}" y="{HEIGHT - 18}" font-size="10">step 0</text>',
        f'<text x="{LEFT + plot_w}" y="{HEIGHT - 18}" text-anchor="end" font-size="10">'
        f"step {steps - 1}</text>",
        f'<text x="{LEFT}" y="{HEIGHT - 4}" font-size="11" fill="#555">- - golden</text>',
        f'<text x="{LEFT + 80}" y="{HEIGHT - 4}" font-size="11" fill="#c62828">— this run</text>',
    ]
    for values, style in ((gold, 'stroke="#555" stroke-dasharray="5,4"'), (run, 'stroke="#c62828"')):
        for segment in _segments(series(values)):
            coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in segment)
            parts.append(f'<polyline fill="none" stroke-width="1.6" {style} points="{coords}"/>')
    for i, v in enumerate(run):
        if not math.isfinite(v):
            parts.append(
                f'<line x1="{sx(i):.1f}" y1="{TOP}" x2="{sx(i):.1f}" y2="{TOP + 8}" stroke="#d50000" '
                f'stroke-width="2"><title>step {i}: {v}</title></line>'
            )
    parts.append("</svg>")
    return "".join(parts)
