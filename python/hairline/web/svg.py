"""The dashboard's own charts, as inline SVG drawn on the server like the HTML report's
(whose helpers and colours they share): a metric's effect over experiments with each one's
interval and threshold band, and an A/A false-positive rate over time with its binomial
band. Every point links to its experiment; every piece of text is escaped."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from hairline.report.html.charts import (
    VERDICT_COLOURS,
    axis_title,
    esc,
    frame,
    num,
    text_at,
    tick_at,
)
from hairline.web.changes import HistoryChange
from hairline.web.health import FprPoint
from hairline.web.pagedata import HistoryPoint

__all__ = ["fpr_svg", "history_svg"]

# Drawn at about the width the page gives a chart (one chart a row, in a 1,180 px column),
# so that its text shows at the page's own size, not scaled down.
_W, _H = 1100, 240
CHANGE_COLOUR = "#7c3aed"
_LEFT, _RIGHT, _TOP, _BOTTOM = 76, 16, 16, 50


def _columns(n: int) -> tuple[float, float]:
    """Each of ``n`` points' column width and the x of the first column's middle."""
    step = (_W - _LEFT - _RIGHT) / max(n, 1)
    return step, _LEFT + step / 2


def _y_axis(low: float, high: float, unit: str, y: Callable[[float], float]) -> list[str]:
    body = []
    for tick in sorted({low, 0.0, high} if low < 0 < high else {low, high}):
        at = y(tick)
        body += [
            f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{num(at)}" y2="{num(at)}" '
            f'stroke="{"#9ca3af" if tick == 0 else "#e5e7eb"}"/>',
            text_at(_LEFT - 6, at + 4, f"{tick_at(tick)}{unit}", anchor="end"),
        ]
    return body


def _x_labels(ids: Sequence[int], step: float, x0: float, title: str) -> list[str]:
    every = max(1, math.ceil(len(ids) / 20))
    return [
        text_at(x0 + i * step, _H - _BOTTOM + 16, f"#{eid}")
        for i, eid in enumerate(ids)
        if i % every == 0 or i == len(ids) - 1
    ] + [axis_title((_LEFT + _W - _RIGHT) / 2, _H - 8, title)]


def _y_title(title: str) -> str:
    return axis_title(16, _TOP + (_H - _TOP - _BOTTOM) / 2, title, vertical=True)


def history_svg(
    metric: str, points: Sequence[HistoryPoint], changes: Sequence[HistoryChange] = ()
) -> str:
    """Relative effect (%) and interval per experiment, oldest left; behind each, the
    ±threshold band it was judged against (grey), its worse side beyond (red); each change
    point a dashed line between the two experiments it lies between, and each level
    between changes its median (violet)."""
    if not points:
        return '<p class="muted">No finished A/B experiment has a verdict on this metric.</p>'
    values = [
        v * 100
        for p in points
        for v in (p.relative_effect, p.ci_low, p.ci_high, p.threshold_rel, p.threshold_rel)
        if v is not None and math.isfinite(v)
    ]
    limit = max((abs(v) for v in values), default=1.0) * 1.15 or 1.0
    plot_h = _H - _TOP - _BOTTOM
    step, x0 = _columns(len(points))

    def y(v: float) -> float:
        return _TOP + (limit - v) / (2 * limit) * plot_h

    body = _y_axis(-limit, limit, "%", y)
    for i, p in enumerate(points):
        x = x0 + i * step
        if p.threshold_rel is not None:
            theta = p.threshold_rel * 100
            worse_top = p.direction == "higher-is-worse"
            worse = (y(limit), y(theta)) if worse_top else (y(-theta), y(-limit))
            body += [
                f'<rect x="{num(x - step / 2)}" y="{num(y(theta))}" width="{num(step)}" '
                f'height="{num(y(-theta) - y(theta))}" fill="#e5e7eb" opacity="0.7"/>',
                f'<rect x="{num(x - step / 2)}" y="{num(worse[0])}" width="{num(step)}" '
                f'height="{num(worse[1] - worse[0])}" fill="#fee2e2" opacity="0.6"/>',
            ]
        if p.relative_effect is None:
            continue
        colour = VERDICT_COLOURS.get(p.label, "#4b5563")
        if p.ci_low is not None and p.ci_high is not None:
            body.append(
                f'<line x1="{num(x)}" x2="{num(x)}" y1="{num(y(p.ci_low * 100))}" '
                f'y2="{num(y(p.ci_high * 100))}" stroke="{colour}" stroke-width="2"/>'
            )
        title = (
            f"experiment {p.experiment_id}, {p.candidate}: {p.relative_effect * 100:+.2f}% "
            f"({p.label})"
        )
        body.append(
            f'<a href="/experiments/{p.experiment_id}"><circle cx="{num(x)}" '
            f'cy="{num(y(p.relative_effect * 100))}" r="4" fill="{colour}">'
            f"<title>{esc(title)}</title></circle></a>"
        )
    body += _change_marks(changes, len(points), step, x0, y)
    body += _x_labels([p.experiment_id for p in points], step, x0, "A/B experiment (oldest left)")
    body.append(_y_title("relative effect (%)"))
    return frame(_W, _H, f"{metric}: relative effect per experiment", body)


def _change_marks(
    changes: Sequence[HistoryChange], n: int, step: float, x0: float, y: Callable[[float], float]
) -> list[str]:
    if not changes:
        return []
    body = []
    starts = [0, *(c.index for c in changes)]
    ends = [*(c.index for c in changes), n]
    levels = [changes[0].before, *(c.after for c in changes)]
    for start, end, level in zip(starts, ends, levels, strict=True):
        at = y(level * 100)
        body.append(
            f'<line class="level" x1="{num(x0 + (start - 0.5) * step)}" '
            f'x2="{num(x0 + (end - 0.5) * step)}" y1="{num(at)}" y2="{num(at)}" '
            f'stroke="{CHANGE_COLOUR}" stroke-width="1.5" opacity="0.8"/>'
        )
    for c in changes:
        x = x0 + (c.index - 0.5) * step
        title = (
            f"change point between experiment {c.last_before.experiment_id} and "
            f"{c.first_after.experiment_id}: {c.size * 100:+.2f} points "
            f"({c.before * 100:+.2f}% to {c.after * 100:+.2f}%), p {c.p_value:.3g}"
        )
        body += [
            f'<line class="change" x1="{num(x)}" x2="{num(x)}" y1="{_TOP}" '
            f'y2="{_H - _BOTTOM}" stroke="{CHANGE_COLOUR}" stroke-width="2" '
            f'stroke-dasharray="5 3"><title>{esc(title)}</title></line>',
            text_at(x + 3, _TOP + 10, f"{c.size * 100:+.1f} pts", anchor="start"),
        ]
    return body


def fpr_svg(metric: str, points: Sequence[FprPoint], alpha: float) -> str:
    """The false-positive rate of the rolling window ending at each A/A run, the band a
    calibrated model stays in 95% of the time (shaded) and alpha (dashed); a window above
    its band is red."""
    if not points:
        return '<p class="muted">No finished A/A run has a verdict on this metric.</p>'
    top = max(max(p.band_high / p.runs for p in points), max(p.rate for p in points), alpha)
    top = min(1.0, top * 1.1) or 1.0
    plot_h = _H - _TOP - _BOTTOM
    step, x0 = _columns(len(points))

    def y(v: float) -> float:
        return _TOP + (top - v) / top * plot_h

    body = _y_axis(0.0, top * 100, "%", lambda v: y(v / 100))
    upper = [(x0 + i * step, y(p.band_high / p.runs)) for i, p in enumerate(points)]
    lower = [(x0 + i * step, y(p.band_low / p.runs)) for i, p in enumerate(points)]
    outline = " ".join(f"{num(a)},{num(b)}" for a, b in [*upper, *reversed(lower)])
    body += [
        f'<polygon points="{outline}" fill="#dcfce7" opacity="0.8"><title>95% band of a '
        f"calibrated model (alpha {alpha:g})</title></polygon>",
        f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{num(y(alpha))}" y2="{num(y(alpha))}" '
        f'stroke="#16a34a" stroke-dasharray="4 3"/>',
        text_at(_W - _RIGHT - 2, y(alpha) - 4, f"alpha {alpha:g}", anchor="end"),
    ]
    line = " ".join(f"{num(x0 + i * step)},{num(y(p.rate))}" for i, p in enumerate(points))
    body.append(f'<polyline points="{line}" fill="none" stroke="#2563eb" stroke-width="1.5"/>')
    for i, p in enumerate(points):
        colour = "#b91c1c" if p.above_band else "#2563eb"
        title = (
            f"experiment {p.experiment_id}: {p.false_positives} false positive(s) in the "
            f"last {p.runs} A/A runs; a calibrated model shows {p.band_low} to {p.band_high}"
        )
        body.append(
            f'<a href="/experiments/{p.experiment_id}"><circle cx="{num(x0 + i * step)}" '
            f'cy="{num(y(p.rate))}" r="3.5" fill="{colour}"><title>{esc(title)}</title>'
            "</circle></a>"
        )
    body += _x_labels([p.experiment_id for p in points], step, x0, "A/A run (oldest left)")
    body.append(_y_title("false positives (%)"))
    return frame(_W, _H, f"{metric}: A/A false-positive rate over time", body)
