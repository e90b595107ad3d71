"""A loss curve of a run drawn against its golden, as inline SVG (no JavaScript, no plotting lib).

Axes carry a few "nice" ticks (steps of 1, 2 or 5 x 10^k, see `nice_ticks`) written compactly
(`0.08`, `8.7e-3`, see `tick_label`), light grid lines at the loss ticks, and the titles
"micro-step" (x: the loop's step over all epochs, as the record's losses are indexed) and "loss".

Non-finite values (a NaN loss is a real outcome) break the line and are marked with a red tick
at the top of the plot, so a diverging run is visible, not silently dropped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT = 540, 250
LEFT, RIGHT, TOP, BOTTOM = 62, 14, 24, 42  # margins: legend above, tick labels and titles around
Y_PADDING = 0.05  # of the loss range, above and below


def _nice_step(raw: float) -> float:
    """The 1, 2, 5 or 10 x 10^k step nearest `raw` (on a log scale: 1.4 rounds to 1, 1.5 to 2)."""
    exponent = math.floor(math.log10(raw))
    mantissa = raw / 10.0**exponent
    for threshold, multiple in ((math.sqrt(50), 10.0), (math.sqrt(10), 5.0), (math.sqrt(2), 2.0)):
        if mantissa >= threshold:
            return multiple * 10.0**exponent
    return 10.0**exponent


def _smaller_step(step: float) -> float:
    """The next 1, 2 or 5 x 10^k step below `step` (5 -> 2 -> 1 -> 0.5)."""
    exponent = math.floor(math.log10(step) + 1e-9)
    mantissa = round(step / 10.0**exponent)
    return {5: 2.0, 2: 1.0}.get(mantissa, 0.5) * 10.0**exponent


def nice_ticks(low: float, high: float, target: int = 4, integer: bool = False) -> list[float]:
    """Tick values inside [low, high], evenly spaced by a 1, 2 or 5 x 10^k step near
    (high - low) / target (never fewer than two ticks when the range allows). `integer` keeps
    steps >= 1 (steps of a run). E.g. 0.0087..0.078 -> [0.02, 0.04, 0.06]; 0..7 -> [0, 2, 4, 6]."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high < low:
        low, high = high, low
    span = high - low
    if span <= 0:
        return [low]
    step = _nice_step(span / max(target, 1))
    if integer:
        step = max(step, 1.0)

    def ticks_for(step: float) -> list[float]:
        first, last = math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9)
        # Round away float noise (3 * 0.02 = 0.06000000000000001) at the step's own precision.
        digits = max(0, -math.floor(math.log10(step))) + 2
        return [round(k * step, digits) + 0.0 for k in range(first, last + 1)]  # + 0.0: no -0.0

    ticks = ticks_for(step)
    while len(ticks) < 2 and not (integer and step <= 1):
        step = _smaller_step(step)
        if integer:
            step = max(step, 1.0)
        ticks = ticks_for(step)
    return ticks


def _exponent(value: float) -> int:
    return math.floor(math.log10(abs(value)) + 1e-9)


def _is_scientific(magnitude: float) -> bool:
    return not 0.01 <= magnitude < 1e4


def tick_label(value: float, step: float | None = None, scientific: bool | None = None) -> str:
    """A compact label: `0.08`, `0.012`, `1.5`, `40`; `8.7e-3`, `2e4` below 0.01 or from 10^4 on.
    `step` (the spacing of the ticks) sets how many digits are shown, so neighbouring labels
    differ; without it, two significant digits. `scientific` forces the style (one per axis)."""
    if value == 0:
        return "0"
    significant = max(1, _exponent(value) - _exponent(step) + 1) if step else 2
    if scientific is None:
        scientific = _is_scientific(abs(value))
    if not scientific:
        decimals = max(0, significant - 1 - _exponent(value))
        text = f"{value:.{decimals}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, exponent = f"{value:.{significant - 1}e}".split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """Labels of one axis's ticks, all in one style (fixed, or scientific when the largest tick
    is below 0.01 or from 10^4 on) and with the digits their spacing needs."""
    if not ticks:
        return []
    step = ticks[1] - ticks[0] if len(ticks) > 1 else None
    largest = max(abs(t) for t in ticks)
    scientific = largest > 0 and _is_scientific(largest)
    return [tick_label(t, step, scientific) for t in ticks]


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
    """SVG markup with the run's losses (solid) over the golden's (dashed), x = micro-step."""
    run, gold = _as_floats(losses), _as_floats(golden)
    finite = [v for v in run + gold if math.isfinite(v)]
    steps = max(len(run), len(gold), 2)
    low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if high - low < 1e-12:  # a flat line still needs a visible range
        low, high = low - 0.5, high + 0.5
    pad = (high - low) * Y_PADDING  # the lines keep off the frame
    low, high = low - pad, high + pad
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    bottom = TOP + plot_h

    def sx(step: float) -> float:
        return LEFT + plot_w * step / (steps - 1)

    def sy(value: float) -> float:
        return TOP + plot_h * (1 - (value - low) / (high - low))

    def series(values: list[float]) -> list[tuple[float, float | None]]:
        return [(sx(i), sy(v) if math.isfinite(v) else None) for i, v in enumerate(values)]

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title or "loss curve")}">',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>',
    ]
    y_ticks = nice_ticks(low, high)
    for value, label in zip(y_ticks, tick_labels(y_ticks), strict=True):
        y = sy(value)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" stroke="#e6e6e6"/>')
        parts.append(
            f'<text class="ytick" x="{LEFT - 5}" y="{y + 3.5:.1f}" text-anchor="end" font-size="10">'
            f"{label}</text>"
        )
    x_ticks = nice_ticks(0, steps - 1, integer=True)
    for value in x_ticks:
        x = sx(value)
        parts.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" stroke="#888"/>')
        parts.append(
            f'<text class="xtick" x="{x:.1f}" y="{bottom + 14}" text-anchor="middle" font-size="10">'
            f"{value:.0f}</text>"
        )
    parts += [
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle" font-size="11" '
        'fill="#333">micro-step</text>',
        f'<text x="14" y="{TOP + plot_h / 2:.1f}" text-anchor="middle" font-size="11" fill="#333" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2:.1f})">loss</text>',
        f'<text x="{LEFT}" y="{TOP - 8}" font-size="11" fill="#555">- - golden</text>',
        f'<text x="{LEFT + 80}" y="{TOP - 8}" font-size="11" fill="#c62828">— this run</text>',
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
