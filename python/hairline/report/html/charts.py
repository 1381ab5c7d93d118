"""The HTML report's charts, as inline SVG: the effect and its interval against the
threshold band, each arm's per-trial values, and each arm's time series with the warm-up cut.

A time series is downsampled before drawing: the batch time is split into at most
:data:`SERIES_BUCKETS` buckets and each arm gets the median and the quartiles of every
bucket, all trials and batches pooled, so a 7-trial demo stays far below a megabyte. Every
piece of text is escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import pyarrow.compute as pc
from numpy.typing import NDArray

from hairline.lab.analysis import MetricAnalysis
from hairline.report.context import MetricTrials, TrialValue, effect_text, number_text
from hairline.store.observations import Observations

__all__ = [
    "SERIES_BUCKETS",
    "TRIALS_WIDTH_PX",
    "VERDICT_COLOURS",
    "arm_colours",
    "axes_with_zero",
    "axis_ticks",
    "axis_title",
    "esc",
    "frame",
    "interval_svg",
    "legend",
    "metric_unit",
    "num",
    "series_svg",
    "text_at",
    "tick_at",
    "trial_name",
    "trial_order",
    "trials_svg",
    "value_title",
]

SERIES_BUCKETS = 200
# The per-trial and series charts' width; the dashboard stretches them to its column.
TRIALS_WIDTH_PX = 760

_ARM_COLOURS = ("#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#be123c")
VERDICT_COLOURS = {
    "regression": "#b91c1c",
    "improvement": "#15803d",
    "no change": "#4b5563",
    "inconclusive": "#b45309",
}


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def num(x: float) -> str:
    """An SVG coordinate."""
    return f"{x:.1f}"


def frame(width: int, height: int, label: str, body: Sequence[str]) -> str:
    return (
        f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{esc(label)}">' + "".join(body) + "</svg>"
    )


def text_at(x: float, y: float, text: str, *, anchor: str = "middle") -> str:
    return f'<text x="{num(x)}" y="{num(y)}" text-anchor="{anchor}">{esc(text)}</text>'


def axis_title(
    x: float, y: float, text: str, *, vertical: bool = False, anchor: str = "middle"
) -> str:
    """An axis's title (what it measures, in which unit): under the x axis, along the y
    axis turned a quarter (``vertical``), or above it (``anchor="start"``: a metric's
    name and unit are longer than a short chart is high)."""
    turn = f' transform="rotate(-90 {num(x)} {num(y)})"' if vertical else ""
    return (
        f'<text class="axis-title" x="{num(x)}" y="{num(y)}" text-anchor="{anchor}"{turn}>'
        f"{esc(text)}</text>"
    )


# Units by the words metric names end with (names carry their units: cpu_ns_per_request,
# latency_p99_us, anon_memory_bytes, goodput_per_s).
_UNIT_WORDS = {"ns": "ns", "us": "µs", "ms": "ms", "s": "s", "bytes": "bytes"}


def metric_unit(metric: str) -> str:
    """The unit of ``metric``'s values as its name says it: ``ns per request``, ``µs``,
    ``bytes``, ``per s``, ``share of requests`` for a rate; "" when the name says none."""
    words = metric.lower().split("_")
    per = ""
    if words[-2:] == ["per", "request"]:
        per, words = "per request", words[:-2]
    elif words[-2:] == ["per", "s"]:
        return "per s"
    if words and words[-1] == "rate":
        return "share of requests"
    unit = next((_UNIT_WORDS[w] for w in reversed(words) if w in _UNIT_WORDS), "")
    return f"{unit} {per}".strip()


def value_title(metric: str) -> str:
    """A value axis's title: the metric and its unit."""
    unit = metric_unit(metric)
    return f"{metric} ({unit})" if unit else metric


def axes_with_zero(
    width: int, left: float, right: float, top: float, base: float, zero_y: float
) -> list[str]:
    """A plot's two axes (left and bottom, the plot spanning ``top``..``base``) and a dashed
    line at the value 0 (``zero_y``), for charts of effects that may be either sign."""
    return [
        f'<line x1="{num(left)}" y1="{num(base)}" x2="{num(width - right)}" y2="{num(base)}" '
        'stroke="#999"/>',
        f'<line x1="{num(left)}" y1="{num(top)}" x2="{num(left)}" y2="{num(base)}" stroke="#999"/>',
        f'<line x1="{num(left)}" y1="{num(zero_y)}" x2="{num(width - right)}" y2="{num(zero_y)}" '
        'stroke="#999" stroke-dasharray="4 3"/>',
    ]


def arm_colours(arms: Sequence[str]) -> dict[str, str]:
    """Each arm's colour, by its place in ``arms``: one arm, one colour in every chart."""
    return {arm: _ARM_COLOURS[i % len(_ARM_COLOURS)] for i, arm in enumerate(arms)}


def tick_at(x: float) -> str:
    """An axis label: few digits, no trailing zeros."""
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}"


# --- the effect against its threshold ------------------------------------------------------


# Tick labels closer than this (in px) would print over each other.
_MIN_TICK_GAP_PX = 44


def axis_ticks(limit: float, theta: float, *, px_per_unit: float) -> list[float]:
    """Labelled ticks of the interval axis (-limit..limit): 0, ±threshold where they have
    room, and ±limit/2 where the threshold band is too narrow to label or absent."""
    ticks = [0.0]
    if theta > 0 and theta * px_per_unit >= _MIN_TICK_GAP_PX:
        ticks += [-theta, theta]
    far = limit / 2
    if abs(far - theta) * px_per_unit >= _MIN_TICK_GAP_PX or theta <= 0:
        ticks += [-far, far]
    return sorted(set(ticks))


def interval_svg(result: MetricAnalysis) -> str:
    """The effect and its interval on an axis with the ±threshold band and the worse side."""
    c, rule = result.comparison, result.verdict.rule
    scale = 100.0 if rule.kind == "relative" else 1.0
    unit = "%" if rule.kind == "relative" else ""
    effect = (c.effect_rel if rule.kind == "relative" else c.effect_abs) * scale
    lo, hi = (v * scale for v in (c.ci_rel if rule.kind == "relative" else c.ci_abs))
    if any(math.isnan(v) or math.isinf(v) for v in (effect, lo, hi)):
        return '<p class="muted">No interval to draw: the model could not compute one.</p>'
    theta = rule.threshold * scale
    limit = max(abs(lo), abs(hi), abs(effect), theta) * 1.2 or 1.0
    width, height, left, right = 520, 58, 14, 506

    def x(v: float) -> float:
        return left + (v + limit) / (2 * limit) * (right - left)

    worse_high = rule.direction == "higher-is-worse"
    body = [f'<rect x="{left}" y="8" width="{right - left}" height="26" fill="#f9fafb"/>']
    if theta > 0:
        worse = (x(theta), x(limit)) if worse_high else (x(-limit), x(-theta))
        better = (x(-limit), x(-theta)) if worse_high else (x(theta), x(limit))
        body += [
            f'<rect x="{num(worse[0])}" y="8" width="{num(worse[1] - worse[0])}" height="26" '
            f'fill="#fee2e2"><title>worse by more than the threshold</title></rect>',
            f'<rect x="{num(better[0])}" y="8" width="{num(better[1] - better[0])}" height="26" '
            f'fill="#dcfce7"><title>better by more than the threshold</title></rect>',
            f'<rect x="{num(x(-theta))}" y="8" width="{num(x(theta) - x(-theta))}" height="26" '
            f'fill="#e5e7eb"><title>within ±{esc(tick_at(theta))}{unit}: '
            f"smaller than what matters</title></rect>",
        ]
    body.append(f'<line x1="{num(x(0))}" x2="{num(x(0))}" y1="6" y2="36" stroke="#9ca3af"/>')
    for tick in axis_ticks(limit, theta, px_per_unit=(right - left) / (2 * limit)):
        body.append(text_at(x(tick), 50, f"{tick:+.3g}{unit}" if tick else "0"))
    body.append(
        text_at(right - 4, 20, "worse →", anchor="end")
        if worse_high
        else text_at(left + 4, 20, "← worse", anchor="start")
    )
    colour = VERDICT_COLOURS[result.verdict.label]
    effect_label, interval_label = effect_text(result)
    y = 27
    body += [
        f'<line x1="{num(x(lo))}" x2="{num(x(hi))}" y1="{y}" y2="{y}" stroke="{colour}" '
        f'stroke-width="3"/>',
        f'<line x1="{num(x(lo))}" x2="{num(x(lo))}" y1="{y - 5}" y2="{y + 5}" '
        f'stroke="{colour}" stroke-width="2"/>',
        f'<line x1="{num(x(hi))}" x2="{num(x(hi))}" y1="{y - 5}" y2="{y + 5}" '
        f'stroke="{colour}" stroke-width="2"/>',
        f'<circle cx="{num(x(effect))}" cy="{y}" r="5" fill="{colour}"><title>'
        f"effect {esc(effect_label)}, interval {esc(interval_label)}</title></circle>",
    ]
    label = f"{result.metric}: effect {effect_label} with interval {interval_label}"
    return frame(width, height, label, body)


# --- per-trial values ------------------------------------------------------------------------


def trial_order(trials: MetricTrials) -> list[object]:
    """The trials in the order the arms' values first name them."""
    order: dict[object, None] = {}
    for values in trials.by_arm.values():
        for v in values:
            order.setdefault(v.trial, None)
    return list(order)


def trials_svg(trials: MetricTrials, colours: dict[str, str]) -> str:
    """Each arm's per-trial value; the arms of one trial joined, since they ran together."""
    labels = trial_order(trials)
    values = [v.value for vs in trials.by_arm.values() for v in vs if math.isfinite(v.value)]
    if not values:
        return ""
    top, bottom = max(values), min(values)
    pad = (top - bottom) * 0.1 or max(abs(top) * 0.01, 1e-9)
    top, bottom = top + pad, bottom - pad
    # As wide as the series chart below it, whatever the number of trials: the axes carry
    # titles with units, and a few trials are not squeezed into a stamp.
    left, top_px, plot_h = 84, 22, 150
    width = TRIALS_WIDTH_PX
    step = (width - left - 20) / max(len(labels), 1)
    height = top_px + plot_h + 44

    def y(v: float) -> float:
        return top_px + (top - v) / (top - bottom) * plot_h

    def x(i: int) -> float:
        return left + step * (i + 0.5)

    body = []
    for tick in (bottom + pad, (top + bottom) / 2, top - pad):
        body += [
            f'<line x1="{left}" x2="{width - 10}" y1="{num(y(tick))}" y2="{num(y(tick))}" '
            f'stroke="#e5e7eb"/>',
            text_at(left - 6, y(tick) + 4, tick_at(tick), anchor="end"),
        ]
    arms = list(trials.by_arm)
    offset = {arm: (i - (len(arms) - 1) / 2) * 7 for i, arm in enumerate(arms)}
    by_trial: dict[object, dict[str, TrialValue]] = {}
    for arm, vs in trials.by_arm.items():
        for v in vs:
            by_trial.setdefault(v.trial, {})[arm] = v
    every = max(1, len(labels) // 12)
    for i, label in enumerate(labels):
        points = [
            (x(i) + offset[arm], y(v.value), arm, v)
            for arm, v in by_trial.get(label, {}).items()
            if math.isfinite(v.value)
        ]
        if len(points) > 1:
            path = " ".join(f"{num(px)},{num(py)}" for px, py, _, _ in points)
            body.append(f'<polyline points="{path}" fill="none" stroke="#9ca3af"/>')
        for px, py, arm, v in points:
            body.append(
                f'<circle cx="{num(px)}" cy="{num(py)}" r="4" fill="{colours.get(arm, "#000")}">'
                f"<title>trial {esc(trial_name(label))}, {esc(arm)}: {esc(number_text(v.value))}"
                f" ({v.rows} rows)</title></circle>"
            )
        if i % every == 0:
            body.append(text_at(x(i), top_px + plot_h + 16, trial_name(label)))
    body += [
        axis_title(8, 12, f"{value_title(trials.metric)}, per-trial mean", anchor="start"),
        axis_title(left + (width - left - 20) / 2, top_px + plot_h + 36, "trial (from 1)"),
    ]
    body += legend(arms, colours, width)
    return frame(width, height, f"{trials.metric}: per-trial values", body)


def trial_name(label: object) -> str:
    """A trial as shown: numbered from 1, as the lab's progress line and notes number them
    (the observations' ``trial`` column is the lab's index, from 0); ``all`` when the
    observations have no trials; any other label as it is."""
    if label is None:
        return "all"
    if isinstance(label, int) and not isinstance(label, bool):
        return str(label + 1)
    return str(label)


def legend(arms: Sequence[str], colours: dict[str, str], width: int) -> list[str]:
    body = []
    x = width - 14
    for arm in reversed(arms):
        body.append(text_at(x, 12, arm, anchor="end"))
        x -= 8 + 7 * len(arm)
        body.append(f'<circle cx="{num(x)}" cy="8" r="4" fill="{colours.get(arm, "#000")}"/>')
        x -= 14
    return body


# --- time series -----------------------------------------------------------------------------


def _buckets(
    t: NDArray[np.float64], values: NDArray[np.float64], start: float, width_s: float, n: int
) -> list[tuple[float, float, float, float]]:
    """(bucket mid time, 25th, 50th, 75th percentile) of every non-empty bucket."""
    index = np.clip(((t - start) / width_s).astype(np.int64), 0, n - 1)
    order = np.lexsort((values, index))
    index, ordered = index[order], values[order]
    bounds = np.searchsorted(index, np.arange(n + 1))
    out = []
    for b in range(n):
        part = ordered[bounds[b] : bounds[b + 1]]
        if len(part):
            q25, q50, q75 = np.quantile(part, (0.25, 0.5, 0.75))
            out.append((start + (b + 0.5) * width_s, float(q25), float(q50), float(q75)))
    return out


def series_svg(
    observations: Observations, trials: MetricTrials, colours: dict[str, str]
) -> tuple[str, str]:
    """The series of every arm over batch time, with each trial's warm-up cut; and a caption."""
    table = observations.table
    rows = table.filter(pc.equal(table.column("metric"), trials.metric))
    arms = rows.column("arm").to_numpy(zero_copy_only=False)
    t = rows.column("t").to_numpy(zero_copy_only=False).astype(np.float64)
    values = rows.column("value").to_numpy(zero_copy_only=False).astype(np.float64)
    start, end = float(t.min()), float(t.max())
    n = max(1, min(SERIES_BUCKETS, len(np.unique(t))))
    width_s = (end - start) / n or 1.0
    series = {
        arm: _buckets(t[arms == arm], values[arms == arm], start, width_s, n)
        for arm in trials.by_arm
    }
    low = min(b[1] for s in series.values() for b in s)
    high = max(b[3] for s in series.values() for b in s)
    pad = (high - low) * 0.08 or max(abs(high) * 0.01, 1e-9)
    low, high = (low - pad if low - pad > 0 or low < 0 else 0.0), high + pad
    width, height, left, right, top, plot_h = TRIALS_WIDTH_PX, 264, 84, 748, 22, 190

    def x(v: float) -> float:
        return left + (v - start) / ((end - start) or 1.0) * (right - left)

    def y(v: float) -> float:
        return top + (high - v) / (high - low) * plot_h

    body = []
    for tick in np.linspace(low, high, 4):
        body += [
            f'<line x1="{left}" x2="{right}" y1="{num(y(tick))}" y2="{num(y(tick))}" '
            f'stroke="#e5e7eb"/>',
            text_at(left - 6, y(tick) + 4, tick_at(float(tick)), anchor="end"),
        ]
    for tick in np.linspace(start, end, 5):
        body.append(text_at(x(tick), top + plot_h + 16, f"{tick:.3g} s"))
    cuts = [
        (arm, v)
        for arm, vs in trials.by_arm.items()
        for v in vs
        if v.rows_cut and v.cut_t_s is not None
    ]
    if cuts:
        last = max(v.cut_t_s or start for _, v in cuts)
        body += [
            f'<rect x="{left}" y="{top}" width="{num(x(last) - left)}" height="{plot_h}" '
            f'fill="#9ca3af" fill-opacity="0.12"><title>warm-up: cut before the analysis'
            f"</title></rect>",
            text_at(left + 4, top + 12, "warm-up (cut)", anchor="start"),
        ]
    for arm, points in series.items():
        colour = colours.get(arm, "#000")
        upper = " ".join(f"{num(x(p[0]))},{num(y(p[3]))}" for p in points)
        lower = " ".join(f"{num(x(p[0]))},{num(y(p[1]))}" for p in reversed(points))
        median = " ".join(f"{num(x(p[0]))},{num(y(p[2]))}" for p in points)
        body += [
            f'<polygon points="{upper} {lower}" fill="{colour}" fill-opacity="0.15" '
            f'stroke="none"/>',
            f'<polyline points="{median}" fill="none" stroke="{colour}" stroke-width="1.5">'
            f"<title>{esc(arm)}: median per bucket</title></polyline>",
        ]
    for arm, v in cuts:
        cx = num(x(v.cut_t_s or start))
        body.append(
            f'<line x1="{cx}" x2="{cx}" y1="{top}" y2="{top + plot_h}" '
            f'stroke="{colours.get(arm, "#000")}" stroke-dasharray="4 3" stroke-width="1.2">'
            f"<title>trial {esc(trial_name(v.trial))}, {esc(arm)}: warm-up cut at "
            f"{v.cut_t_s:.3g} s ({v.rows_cut} rows)</title></line>"
        )
    body += [
        axis_title(8, 12, f"{value_title(trials.metric)} over batch time", anchor="start"),
        axis_title((left + right) / 2, top + plot_h + 34, "time within the batch (s)"),
    ]
    body += legend(list(series), colours, width)
    svg = frame(width, height, f"{trials.metric} over time per arm", body)
    caption = (
        f"{esc(trials.metric)} over the time within each batch, all trials and batches pooled: "
        f"the line is the median of each {width_s * 1000:.3g} ms bucket, the band its 25th "
        f"to 75th percentile. "
    )
    if cuts:
        caption += (
            f"Dashed lines mark where each trial's warm-up was cut (per trial and arm; "
            f"{trials.rows_cut} rows in all); the analysis uses only the rows after them."
        )
    else:
        caption += "No warm-up was cut from this series."
    return svg, caption
