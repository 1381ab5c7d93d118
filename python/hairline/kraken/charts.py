"""The SVG line charts of Kraken's HTML report (pure): round ticks, and legends that fit.

Ticks fall on round values (steps of 1, 2, 2.5 or 5 times a power of ten) and an axis whose
data start near 0 starts at 0, so a test's time axis reads 0, 5, 10 s rather than the first
sample's 0.22, 4.22 s; the value axis ends on a tick. A legend beside the plot gets the room
its longest name needs (the first chart's "measured" and "theoretical" were cut to
"measurec", "theoretica"; issue 31).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

__all__ = ["LEGEND_CHAR_PX", "Points", "line_chart", "nice_ticks", "tick_label"]

Points = Sequence[tuple[float, float]]

#: The room a legend gives each character of a name at the charts' 11 px: more than an
#: average glyph of a sans-serif face (about 6 px), so that names are never cut.
LEGEND_CHAR_PX = 7.0
_WIDTH, _HEIGHT, _LEFT, _TOP, _BOTTOM = 720, 260, 60, 24, 40
_BAND_LABELS_PX = 70  # the level bands' names (NOMORE, BACKOFF) right of the plot
_LEGEND_LINE_PX = 22  # a legend's colour sample and the gap after it


def nice_ticks(low: float, high: float, *, most: int = 6) -> list[float]:
    """At most ``most`` round values from ``low`` to ``high`` (both included when round),
    a step of 1, 2, 2.5 or 5 times a power of ten apart."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    step = _nice_step((high - low) / (most - 1))
    first = math.ceil(low / step - 1e-9)
    last = math.floor(high / step + 1e-9)
    return [_clean(k * step) for k in range(first, last + 1)]


def _nice_step(raw: float) -> float:
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * power >= raw * (1 - 1e-9))


def _clean(x: float) -> float:
    # 3 * 0.1 is 0.30000000000000004: round away the binary fraction's dust.
    return 0.0 if x == 0 else round(x, 12 - math.floor(math.log10(abs(x))))


def tick_label(x: float) -> str:
    """A tick's label: thousands separated, no trailing zeros."""
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def line_chart(
    title: str,
    series: Sequence[tuple[str, str, Points]],
    *,
    x_label: str,
    y_label: str,
    bands: Sequence[tuple[float, float, str, str]] = (),
    y_max: float | None = None,
    dashed: frozenset[str] = frozenset(),
) -> str:
    """A line chart: ``series`` are (name, colour, points); ``bands`` (low, high, colour,
    label) are shaded behind them across the whole width, their labels right of the plot
    (the series' names then go in a row at the top of the plot; without bands, in a column
    right of it). ``y_max`` fixes the value axis's top; else it is the first round value
    above the data."""
    names = [name for name, _, _ in series]
    legend_px = _LEGEND_LINE_PX + LEGEND_CHAR_PX * max(map(len, names), default=0)
    right = _BAND_LABELS_PX if bands else max(_BAND_LABELS_PX, round(legend_px) + 12)
    width, height, left, top, bottom = _WIDTH, _HEIGHT, _LEFT, _TOP, _BOTTOM
    xs = [x for _, _, pts in series for x, _ in pts] or [0.0, 1.0]
    ys = [y for _, _, pts in series for _, y in pts if math.isfinite(y)] or [0.0, 1.0]
    x0, x1 = min(xs), max(xs)
    # An axis whose data start near 0 (a test's first sample, a load's first step) starts
    # at 0: its ticks are then round numbers of seconds or requests.
    if 0 <= x0 <= 0.2 * x1:
        x0 = 0.0
    x1 = x1 if x1 > x0 else x0 + 1.0
    if y_max is not None and y_max > 0:
        y1 = y_max
    else:
        top_value = max(ys) * 1.05 if max(ys) > 0 else 1.0
        y1 = nice_ticks(0.0, top_value)[-1]
        y1 = y1 if y1 >= top_value else y1 + _nice_step(top_value / 5)
    y_ticks = nice_ticks(0.0, y1)
    y1 = max(y1, y_ticks[-1])

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def py(y: float) -> float:
        return top + (1 - min(max(y, 0.0), y1) / y1) * (height - top - bottom)

    body = [f'<text x="{left}" y="14" class="t">{_e(title)}</text>']
    for low, high, colour, label in bands:
        if low >= y1:
            continue
        ya, yb = py(min(high, y1)), py(low)
        body.append(
            f'<rect x="{left}" y="{ya:.1f}" width="{width - left - right}" '
            f'height="{max(yb - ya, 0):.1f}" fill="{colour}"/>'
            f'<text x="{width - right + 4}" y="{(ya + yb) / 2 + 4:.1f}" '
            f'class="s">{_e(label)}</text>'
        )
    for y in y_ticks:
        body.append(
            f'<line x1="{left}" x2="{width - right}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
            f'class="g"/><text x="{left - 4}" y="{py(y) + 4:.1f}" class="s" '
            f'text-anchor="end">{tick_label(y)}</text>'
        )
    for x in nice_ticks(x0, x1):
        body.append(
            f'<text x="{px(x):.1f}" y="{height - bottom + 16}" class="s" '
            f'text-anchor="middle">{tick_label(x)}</text>'
        )
    body.append(
        f'<text x="{(left + width - right) / 2}" y="{height - 6}" class="s" '
        f'text-anchor="middle">{_e(x_label)}</text>'
        f'<text x="12" y="{(top + height - bottom) / 2}" class="s" text-anchor="middle" '
        f'transform="rotate(-90 12 {(top + height - bottom) / 2})">{_e(y_label)}</text>'
    )
    row_x = float(left + 8)
    for k, (name, colour, pts) in enumerate(series):
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts if math.isfinite(y))
        dash = ' stroke-dasharray="6 4"' if name in dashed else ""
        body.append(
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>'
        )
        for x, y in pts if len(pts) <= 60 else ():
            if math.isfinite(y):
                body.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour}"/>')
        if bands:
            body.append(
                f'<text x="{row_x:.0f}" y="{top + 12}" class="s" fill="{colour}">{_e(name)}</text>'
            )
            row_x += LEGEND_CHAR_PX * len(name) + 16
            continue
        ly, lx = top + 14 * k + 8, width - right + 8
        body.append(
            f'<line x1="{lx}" x2="{lx + 14}" y1="{ly}" y2="{ly}" stroke="{colour}" '
            f'stroke-width="2"{dash}/>'
            f'<text x="{lx + _LEGEND_LINE_PX}" y="{ly + 4}" class="s">{_e(name)}</text>'
        )
    return (
        f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{_e(title)}">' + "".join(body) + "</svg>"
    )
