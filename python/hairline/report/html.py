"""An experiment as one self-contained HTML file: inline CSS and SVG, no scripts, no URLs.

The page reads top to bottom: the headline (and the failure, if any), a summary table of
every metric, then per metric the effect with its interval drawn against the threshold
band, the p-value, the model and why it was chosen, the per-trial values of every arm (a
chart and a table), and for time series (per-request rows over ``t``) the series per arm
with the warm-up cut marked. Setup and host facts close the page.

The charts are SVG written here. A time series is downsampled before drawing: the batch
time is split into at most :data:`SERIES_BUCKETS` buckets and each arm gets the median and
the quartiles of every bucket, all trials and batches pooled, so a 7-trial demo stays far
below a megabyte. Every piece of text is escaped; nothing is fetched from anywhere.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import datetime

import numpy as np
import pyarrow.compute as pc
from numpy.typing import NDArray

from hairline import __version__
from hairline.lab.analysis import MetricAnalysis
from hairline.report.context import (
    ExperimentReport,
    MetricTrials,
    TrialValue,
    deciding_text,
    effect_text,
    headline,
    metric_trials,
    number_text,
    threshold_text,
)
from hairline.store.observations import Observations

__all__ = ["SERIES_BUCKETS", "render_html"]

SERIES_BUCKETS = 200

_ARM_COLOURS = ("#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#be123c")
_VERDICT_COLOURS = {
    "regression": "#b91c1c",
    "improvement": "#15803d",
    "no change": "#4b5563",
    "inconclusive": "#b45309",
}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2937;
  max-width:1000px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:32px 0 8px;
  border-bottom:1px solid #e5e7eb;padding-bottom:4px}h3{font-size:14px;margin:16px 0 4px}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f3f4f6;
  padding:1px 4px;border-radius:3px}
pre{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f9fafb;
  border:1px solid #e5e7eb;padding:10px;overflow:auto;white-space:pre-wrap}
.status{padding:10px 14px;border-radius:6px;font-weight:600;margin:8px 0}
.s-regression,.s-failed{background:#fee2e2;color:#991b1b}
.s-no-regression{background:#dcfce7;color:#166534}
.s-inconclusive,.s-cancelled{background:#fef3c7;color:#92400e}
.s-running{background:#dbeafe;color:#1e40af}
.meta,.muted,figcaption{color:#6b7280}figcaption{font-size:12px;max-width:760px}
figure{margin:8px 0 16px}
table{border-collapse:collapse;margin:6px 0 12px;display:block;max-width:100%;
  overflow-x:auto}
th,td{padding:3px 10px;border-bottom:1px solid #e5e7eb;text-align:right;vertical-align:top}
th{font-weight:600;background:#f9fafb}th.l,td.l{text-align:left}
.v-regression{color:#b91c1c;font-weight:700}.v-improvement{color:#15803d;font-weight:600}
.v-no-change{color:#4b5563}.v-inconclusive{color:#b45309;font-weight:600}
.cmp{margin:6px 0 2px}.cmp b{font-size:15px}
svg{display:block;max-width:100%;height:auto}
svg text{font:11px system-ui,sans-serif;fill:#4b5563}
details summary{cursor:pointer;color:#374151}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _slug(label: str) -> str:
    return label.replace(" ", "-")


def _f(x: float) -> str:
    """An SVG coordinate."""
    return f"{x:.1f}"


def _svg(width: int, height: int, label: str, body: Sequence[str]) -> str:
    return (
        f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{_e(label)}">' + "".join(body) + "</svg>"
    )


def _text(x: float, y: float, text: str, *, anchor: str = "middle") -> str:
    return f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}">{_e(text)}</text>'


def _colours(arms: Sequence[str]) -> dict[str, str]:
    return {arm: _ARM_COLOURS[i % len(_ARM_COLOURS)] for i, arm in enumerate(arms)}


def _tick(x: float) -> str:
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


def _interval_svg(result: MetricAnalysis) -> str:
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
            f'<rect x="{_f(worse[0])}" y="8" width="{_f(worse[1] - worse[0])}" height="26" '
            f'fill="#fee2e2"><title>worse by more than the threshold</title></rect>',
            f'<rect x="{_f(better[0])}" y="8" width="{_f(better[1] - better[0])}" height="26" '
            f'fill="#dcfce7"><title>better by more than the threshold</title></rect>',
            f'<rect x="{_f(x(-theta))}" y="8" width="{_f(x(theta) - x(-theta))}" height="26" '
            f'fill="#e5e7eb"><title>within ±{_e(_tick(theta))}{unit}: '
            f"smaller than what matters</title></rect>",
        ]
    body.append(f'<line x1="{_f(x(0))}" x2="{_f(x(0))}" y1="6" y2="36" stroke="#9ca3af"/>')
    for tick in axis_ticks(limit, theta, px_per_unit=(right - left) / (2 * limit)):
        body.append(_text(x(tick), 50, f"{tick:+.3g}{unit}" if tick else "0"))
    body.append(
        _text(right - 4, 20, "worse →", anchor="end")
        if worse_high
        else _text(left + 4, 20, "← worse", anchor="start")
    )
    colour = _VERDICT_COLOURS[result.verdict.label]
    effect_label, interval_label = effect_text(result)
    y = 27
    body += [
        f'<line x1="{_f(x(lo))}" x2="{_f(x(hi))}" y1="{y}" y2="{y}" stroke="{colour}" '
        f'stroke-width="3"/>',
        f'<line x1="{_f(x(lo))}" x2="{_f(x(lo))}" y1="{y - 5}" y2="{y + 5}" '
        f'stroke="{colour}" stroke-width="2"/>',
        f'<line x1="{_f(x(hi))}" x2="{_f(x(hi))}" y1="{y - 5}" y2="{y + 5}" '
        f'stroke="{colour}" stroke-width="2"/>',
        f'<circle cx="{_f(x(effect))}" cy="{y}" r="5" fill="{colour}"><title>'
        f"effect {_e(effect_label)}, interval {_e(interval_label)}</title></circle>",
    ]
    label = f"{result.metric}: effect {effect_label} with interval {interval_label}"
    return _svg(width, height, label, body)


# --- per-trial values ------------------------------------------------------------------------


def _trial_order(trials: MetricTrials) -> list[object]:
    order: dict[object, None] = {}
    for values in trials.by_arm.values():
        for v in values:
            order.setdefault(v.trial, None)
    return list(order)


def _trials_svg(trials: MetricTrials, colours: dict[str, str]) -> str:
    """Each arm's per-trial value; the arms of one trial joined, since they ran together."""
    labels = _trial_order(trials)
    values = [v.value for vs in trials.by_arm.values() for v in vs if math.isfinite(v.value)]
    if not values:
        return ""
    top, bottom = max(values), min(values)
    pad = (top - bottom) * 0.1 or max(abs(top) * 0.01, 1e-9)
    top, bottom = top + pad, bottom - pad
    left, top_px, plot_h = 70, 22, 120
    width = min(720, max(320, left + 20 + 44 * len(labels)))
    step = (width - left - 20) / max(len(labels), 1)
    height = top_px + plot_h + 30

    def y(v: float) -> float:
        return top_px + (top - v) / (top - bottom) * plot_h

    def x(i: int) -> float:
        return left + step * (i + 0.5)

    body = []
    for tick in (bottom + pad, (top + bottom) / 2, top - pad):
        body += [
            f'<line x1="{left}" x2="{width - 10}" y1="{_f(y(tick))}" y2="{_f(y(tick))}" '
            f'stroke="#e5e7eb"/>',
            _text(left - 6, y(tick) + 4, _tick(tick), anchor="end"),
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
            path = " ".join(f"{_f(px)},{_f(py)}" for px, py, _, _ in points)
            body.append(f'<polyline points="{path}" fill="none" stroke="#9ca3af"/>')
        for px, py, arm, v in points:
            body.append(
                f'<circle cx="{_f(px)}" cy="{_f(py)}" r="4" fill="{colours.get(arm, "#000")}">'
                f"<title>trial {_e(_trial_name(label))}, {_e(arm)}: {_e(number_text(v.value))}"
                f" ({v.rows} rows)</title></circle>"
            )
        if i % every == 0:
            body.append(_text(x(i), top_px + plot_h + 16, _trial_name(label)))
    body.append(_text(left, 12, "per-trial mean", anchor="start"))
    body += _legend(arms, colours, width)
    return _svg(width, height, f"{trials.metric}: per-trial values", body)


def _trial_name(label: object) -> str:
    return "all" if label is None else str(label)


def _legend(arms: Sequence[str], colours: dict[str, str], width: int) -> list[str]:
    body = []
    x = width - 14
    for arm in reversed(arms):
        body.append(_text(x, 12, arm, anchor="end"))
        x -= 8 + 7 * len(arm)
        body.append(f'<circle cx="{_f(x)}" cy="8" r="4" fill="{colours.get(arm, "#000")}"/>')
        x -= 14
    return body


def _trials_table(trials: MetricTrials, pairs: Sequence[tuple[str, str]]) -> str:
    """Each arm's value per trial, and each (candidate, baseline) pair's difference."""
    arms = list(trials.by_arm)
    by_trial: dict[object, dict[str, TrialValue]] = {}
    for arm, vs in trials.by_arm.items():
        for v in vs:
            by_trial.setdefault(v.trial, {})[arm] = v
    shown = [(a, b) for a, b in pairs if a in arms and b in arms]
    head = ['<th class="l">trial</th>', *(f"<th>{_e(a)}</th>" for a in arms)]
    head += [f"<th>{_e(a)} vs {_e(b)}</th>" for a, b in shown]
    if trials.rows_cut:
        head.append("<th>warm-up rows cut</th>")
    rows = []
    for label in _trial_order(trials):
        cells = by_trial[label]
        row = [f'<td class="l">{_e(_trial_name(label))}</td>']
        row += [f"<td>{_e(number_text(cells[a].value)) if a in cells else ''}</td>" for a in arms]
        for arm, baseline in shown:
            text = ""
            if arm in cells and baseline in cells and cells[baseline].value:
                base = cells[baseline].value
                text = f"{(cells[arm].value - base) / base * 100:+.2f}%"
            row.append(f"<td>{_e(text)}</td>")
        if trials.rows_cut:
            cut = " / ".join(f"{_e(a)} {cells[a].rows_cut}" for a in arms if a in cells)
            row.append(f"<td>{cut}</td>")
        rows.append("<tr>" + "".join(row) + "</tr>")
    return "<table><tr>" + "".join(head) + "</tr>" + "".join(rows) + "</table>"


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


def _series_svg(
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
    width, height, left, right, top, plot_h = 760, 250, 70, 748, 22, 190

    def x(v: float) -> float:
        return left + (v - start) / ((end - start) or 1.0) * (right - left)

    def y(v: float) -> float:
        return top + (high - v) / (high - low) * plot_h

    body = []
    for tick in np.linspace(low, high, 4):
        body += [
            f'<line x1="{left}" x2="{right}" y1="{_f(y(tick))}" y2="{_f(y(tick))}" '
            f'stroke="#e5e7eb"/>',
            _text(left - 6, y(tick) + 4, _tick(float(tick)), anchor="end"),
        ]
    for tick in np.linspace(start, end, 5):
        body.append(_text(x(tick), top + plot_h + 16, f"{tick:.3g} s"))
    cuts = [
        (arm, v)
        for arm, vs in trials.by_arm.items()
        for v in vs
        if v.rows_cut and v.cut_t_s is not None
    ]
    if cuts:
        last = max(v.cut_t_s or start for _, v in cuts)
        body += [
            f'<rect x="{left}" y="{top}" width="{_f(x(last) - left)}" height="{plot_h}" '
            f'fill="#9ca3af" fill-opacity="0.12"><title>warm-up: cut before the analysis'
            f"</title></rect>",
            _text(left + 4, top + 12, "warm-up (cut)", anchor="start"),
        ]
    for arm, points in series.items():
        colour = colours.get(arm, "#000")
        upper = " ".join(f"{_f(x(p[0]))},{_f(y(p[3]))}" for p in points)
        lower = " ".join(f"{_f(x(p[0]))},{_f(y(p[1]))}" for p in reversed(points))
        median = " ".join(f"{_f(x(p[0]))},{_f(y(p[2]))}" for p in points)
        body += [
            f'<polygon points="{upper} {lower}" fill="{colour}" fill-opacity="0.15" '
            f'stroke="none"/>',
            f'<polyline points="{median}" fill="none" stroke="{colour}" stroke-width="1.5">'
            f"<title>{_e(arm)}: median per bucket</title></polyline>",
        ]
    for arm, v in cuts:
        cx = _f(x(v.cut_t_s or start))
        body.append(
            f'<line x1="{cx}" x2="{cx}" y1="{top}" y2="{top + plot_h}" '
            f'stroke="{colours.get(arm, "#000")}" stroke-dasharray="4 3" stroke-width="1.2">'
            f"<title>trial {_e(_trial_name(v.trial))}, {_e(arm)}: warm-up cut at "
            f"{v.cut_t_s:.3g} s ({v.rows_cut} rows)</title></line>"
        )
    body.append(_text(left, 12, f"{trials.metric} over batch time", anchor="start"))
    body += _legend(list(series), colours, width)
    svg = _svg(width, height, f"{trials.metric} over time per arm", body)
    caption = (
        f"{_e(trials.metric)} over the time within each batch, all trials and batches pooled: "
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


# --- the page --------------------------------------------------------------------------------


def _when(moment: datetime | None) -> str:
    return "–" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def _verdict(label: str) -> str:
    return f'<span class="v-{_slug(label)}">{_e(label)}</span>'


def _header(report: ExperimentReport) -> list[str]:
    head = headline(report)
    kind = "A/A" if report.kind == "aa" else "A/B"
    parts = [
        f"<h1>{_e(report.service)} · experiment {report.experiment_id}</h1>",
        f'<div class="status s-{_slug(head.status)}">{_e(head.text)}</div>',
        f'<p class="meta">{kind} · phase {_e(report.phase)} · {report.trials_done} of '
        f"{report.trials} trials · created {_e(_when(report.created_at))} · started "
        f"{_e(_when(report.started_at))} · finished {_e(_when(report.finished_at))}</p>",
    ]
    if report.failure:
        parts.append(f"<h3>Failure</h3><pre>{_e(report.failure)}</pre>")
    if report.notes:
        items = "".join(f"<li>{_e(note)}</li>" for note in report.notes)
        parts.append(f'<ul class="notes">{items}</ul>')
    return parts


def _summary(report: ExperimentReport, anchors: dict[str, str]) -> list[str]:
    analysis = report.analysis
    if analysis is None or not analysis.results:
        return []
    p_header = "p" if analysis.correction == "none" else f"p ({analysis.correction})"
    candidates = list(dict.fromkeys(r.candidate for r in analysis.results))
    mean_b = candidates[0] if len(candidates) == 1 else "candidate"
    chained = analysis.chained
    head = ["metric", "arm", *(["against"] if chained else [])]
    head += ["baseline" if chained else analysis.baseline, mean_b, "effect", "CI", p_header]
    head += ["threshold", "verdict"]
    rows = [
        "<tr>"
        + "".join(
            f'<th class="{"l" if h in ("metric", "arm", "against", "verdict") else ""}">'
            f"{_e(h)}</th>"
            for h in head
        )
        + "</tr>"
    ]
    for r in analysis.results:
        effect, interval = effect_text(r)
        against = f'<td class="l">{_e(r.baseline)}</td>' if chained else ""
        rows.append(
            f'<tr><td class="l"><a href="#{anchors[r.metric]}">{_e(r.metric)}</a></td>'
            f'<td class="l">{_e(r.candidate)}</td>{against}'
            f"<td>{_e(number_text(r.comparison.mean_a))}</td>"
            f"<td>{_e(number_text(r.comparison.mean_b))}</td>"
            f"<td>{_e(effect)}</td><td>{_e(interval)}</td>"
            f"<td>{_e(_p(r.verdict.p_adjusted))}</td><td>{_e(threshold_text(r))}</td>"
            f'<td class="l">{_verdict(r.verdict.label)}</td></tr>'
        )
    against = "its baseline" if chained else analysis.baseline
    parts = [
        f"<h2>Metrics: each arm against {_e(against)}</h2>",
        f'<p class="meta">alpha {analysis.alpha:g}, correction {_e(analysis.correction)}; '
        f"effects and intervals are relative (%) for relative thresholds, in the metric's "
        f"units for absolute ones.</p>",
        "<table>" + "".join(rows) + "</table>",
    ]
    if chained:
        parts.append(f"<p><b>{_e(deciding_text(analysis))}</b></p>")
    return parts


def _p(x: float) -> str:
    return "n/a" if x != x else f"{x:.3g}"


def _comparison(result: MetricAnalysis) -> list[str]:
    c, v = result.comparison, result.verdict
    effect, interval = effect_text(result)
    parts = [
        f'<p class="cmp">{_e(result.candidate)} against {_e(result.baseline)}: '
        f"<b>{_e(effect)}</b> "
        f"{_e(interval)}, p {_e(_p(v.p_adjusted))}, threshold {_e(threshold_text(result))}: "
        f"{_verdict(v.label)} <span class='muted'>({_e(v.reason)})</span></p>",
        _interval_svg(result),
        f'<p class="meta">means {_e(number_text(c.mean_a))} → {_e(number_text(c.mean_b))} '
        f"({c.n_a} and {c.n_b} values) · model <code>{_e(result.model)}</code>: "
        f"{_e(result.model_reason)}"
        + (f" · warm-up: {result.warmup_rows_cut} rows cut" if result.warmup_rows_cut else "")
        + "</p>",
    ]
    if c.warnings:
        parts.append(
            "<ul class='muted'>" + "".join(f"<li>{_e(w)}</li>" for w in c.warnings) + "</ul>"
        )
    return parts


def _metric_section(
    report: ExperimentReport,
    metric: str,
    anchor: str,
    trials: MetricTrials | None,
    colours: dict[str, str],
) -> list[str]:
    results = [
        r for r in (report.analysis.results if report.analysis else ()) if r.metric == metric
    ]
    labels = " ".join(_verdict(r.verdict.label) for r in results)
    parts = [f'<section id="{anchor}"><h2><code>{_e(metric)}</code> {labels}</h2>']
    for r in results:
        parts += _comparison(r)
    if trials is not None and trials.by_arm:
        if report.analysis is not None:
            pairs = list(report.analysis.comparisons)
        else:
            first, *others = trials.by_arm
            pairs = [(arm, first) for arm in others]
        parts += [
            "<h3>Per trial</h3>",
            f"<figure>{_trials_svg(trials, colours)}<figcaption>Each arm's mean per trial"
            + (", after the warm-up cut" if trials.rows_cut else "")
            + "; the arms of a trial ran side by side.</figcaption></figure>",
            _trials_table(trials, pairs),
        ]
        if trials.series and report.observations is not None:
            svg, caption = _series_svg(report.observations, trials, colours)
            parts += [
                "<h3>Over time</h3>",
                f"<figure>{svg}<figcaption>{caption}</figcaption></figure>",
            ]
    parts.append("</section>")
    return parts


def _setup(report: ExperimentReport) -> list[str]:
    rows = [
        ("service", report.service),
        ("experiment", str(report.experiment_id)),
        ("kind", "A/A" if report.kind == "aa" else "A/B"),
        ("design", report.design),
        ("trials", f"{report.trials_done} of {report.trials}"),
        ("load", f"{report.rate_per_s:g} requests/s for {report.duration_s:g} s per batch"),
        ("model", report.model),
    ]
    if report.html_path is not None:
        rows.append(("this report", str(report.html_path)))
    parts = [
        "<h2>Setup</h2><table>"
        + "".join(f'<tr><th class="l">{_e(k)}</th><td class="l">{_e(v)}</td></tr>' for k, v in rows)
        + "</table>"
    ]
    if report.arms:
        parts.append(
            '<h3>Arms</h3><table><tr><th class="l">arm</th><th class="l">source</th>'
            '<th class="l">args and env</th><th class="l">build</th>'
            '<th class="l">build log</th></tr>'
        )
        for arm in report.arms:
            build = "not built" if arm.build_key is None else arm.build_key
            if arm.build_key is not None and arm.build_cached is not None:
                build += " (cached)" if arm.build_cached else " (built)"
            log = "" if arm.build_log is None else str(arm.build_log)
            name = arm.name
            if report.chained and arm.baseline:
                name += f" (against {arm.baseline})"
            parts.append(
                f'<tr><td class="l">{_e(name)}</td><td class="l">{_e(arm.source)}</td>'
                f'<td class="l"><code>{_e(arm.setup)}</code></td>'
                f'<td class="l"><code>{_e(build)}</code></td><td class="l">{_e(log)}</td></tr>'
            )
        parts.append("</table>")
    if report.hosts:
        facts = list(dict.fromkeys(k for h in report.hosts for k in h.facts))
        parts.append(
            '<h3>Hosts</h3><table><tr><th class="l">host</th><th class="l">name</th>'
            '<th class="l">address</th><th class="l">CPUs</th>'
            + "".join(f'<th class="l">{_e(k)}</th>' for k in facts)
            + "</tr>"
        )
        for host in report.hosts:
            cpus = ",".join(str(c) for c in host.cpus)
            parts.append(
                f'<tr><td class="l">{host.host}</td><td class="l">{_e(host.name)}</td>'
                f'<td class="l">{_e(host.address or "")}</td><td class="l">{_e(cpus)}</td>'
                + "".join(f'<td class="l">{_e(host.facts.get(k, ""))}</td>' for k in facts)
                + "</tr>"
            )
        parts.append("</table>")
    return parts


def render_html(report: ExperimentReport) -> str:
    """The whole report as one HTML document (a string; the caller writes it)."""
    trials = (
        {m.metric: m for m in metric_trials(report.observations, report.analysis)}
        if report.observations is not None
        else {}
    )
    metrics = list(
        dict.fromkeys(
            [
                *(r.metric for r in (report.analysis.results if report.analysis else ())),
                *trials,
            ]
        )
    )
    anchors = {m: f"metric-{i}" for i, m in enumerate(metrics)}
    arm_names = [a.name for a in report.arms]
    if report.observations is not None:
        arm_names += [a for a in report.observations.arms if a not in arm_names]
    colours = _colours(arm_names)
    body = [*_header(report), *_summary(report, anchors)]
    for metric in metrics:
        body += _metric_section(report, metric, anchors[metric], trials.get(metric), colours)
    if not metrics:
        body.append('<p class="muted">Nothing was measured.</p>')
    body += _setup(report)
    body.append(f'<p class="muted">Written by hairline {_e(__version__)}.</p>')
    title = f"hairline: {report.service} #{report.experiment_id}: {headline(report).text}"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
