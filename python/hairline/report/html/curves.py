"""Capacity mode's chart: each arm's p99 against the offered rate, every probe of every
batch, the SLO as a line and each batch's knee (the highest rate confirmed under it)
marked on the rate axis."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hairline.report.context import CapacityCurve, ExperimentReport, arm_capacities, capacity_text
from hairline.report.html.charts import (
    esc,
    frame,
    legend,
    num,
    text_at,
    tick_at,
)

__all__ = ["capacity_section", "curves_svg"]

_W, _H = 640, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 16, 24, 40


def curves_svg(curves: Sequence[CapacityCurve], colours: dict[str, str]) -> str:
    """p99 (log scale: it rises by orders of magnitude past the knee) against rate; passed
    probes filled, failed ones hollow; a dashed SLO line; each knee a tick on the axis."""
    points = [(c, p) for c in curves for p in c.points if math.isfinite(p.p99_ms) and p.p99_ms > 0]
    if not points:
        return '<p class="muted">No probe answered.</p>'
    slo = max(c.slo_p99_ms for c in curves)
    rate_max = max(p.rate_per_s for _, p in points) * 1.05
    low = math.log10(min(min(p.p99_ms for _, p in points), slo) / 1.5)
    high = math.log10(max(max(p.p99_ms for _, p in points), slo) * 1.5)
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(rate: float) -> float:
        return _LEFT + rate / rate_max * plot_w

    def y(p99_ms: float) -> float:
        return _TOP + (high - math.log10(p99_ms)) / (high - low) * plot_h

    base = _TOP + plot_h
    body = [
        f'<line x1="{_LEFT}" y1="{num(base)}" x2="{_W - _RIGHT}" y2="{num(base)}" stroke="#999"/>',
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{num(base)}" stroke="#999"/>',
        f'<line x1="{_LEFT}" y1="{num(y(slo))}" x2="{_W - _RIGHT}" y2="{num(y(slo))}" '
        'stroke="#b91c1c" stroke-dasharray="4 3"/>',
        text_at(_W - _RIGHT, y(slo) - 4, f"SLO p99 {tick_at(slo)} ms", anchor="end"),
        text_at(_LEFT + plot_w / 2, _H - 6, "offered rate (requests/s)"),
        text_at(12, _TOP - 8, "p99 (ms)", anchor="start"),
    ]
    for i in range(5):
        rate = rate_max * i / 4
        body.append(text_at(x(rate), base + 16, tick_at(rate)))
    for exponent in range(math.ceil(low), math.floor(high) + 1):
        body.append(
            text_at(_LEFT - 6, y(10.0**exponent) + 4, tick_at(10.0**exponent), anchor="end")
        )
    for curve, point in points:
        colour = colours.get(curve.arm, "#000")
        fill = colour if point.passed else "none"
        body.append(
            f'<circle cx="{num(x(point.rate_per_s))}" cy="{num(y(point.p99_ms))}" r="3" '
            f'fill="{fill}" stroke="{colour}"><title>{esc(curve.arm)}: '
            f"{point.rate_per_s:,.0f}/s for {point.duration_s:g} s, p99 {point.p99_ms:.3g} ms"
            "</title></circle>"
        )
    for curve in curves:
        if curve.max_rate_per_s > 0:
            colour = colours.get(curve.arm, "#000")
            kx = x(curve.max_rate_per_s)
            body.append(
                f'<line x1="{num(kx)}" y1="{_TOP}" x2="{num(kx)}" y2="{num(base)}" '
                f'stroke="{colour}" stroke-opacity="0.35"><title>{esc(curve.arm)} knee, trial '
                f"{curve.trial + 1} batch {curve.batch + 1}: {curve.max_rate_per_s:,.0f}/s"
                "</title></line>"
            )
    arms = list(dict.fromkeys(c.arm for c in curves))
    body += legend(arms, colours, _W)
    return frame(_W, _H, "p99 latency against offered rate, per arm", body)


def capacity_section(report: ExperimentReport, colours: dict[str, str]) -> list[str]:
    """The report's capacity section, or nothing outside capacity mode."""
    if not report.curves:
        return []
    items = "".join(
        f"<li><b>{esc(c.arm)}</b>: {esc(capacity_text(c))}</li>" for c in arm_capacities(report)
    )
    return [
        '<section id="capacity"><h2>Capacity: latency against throughput</h2>',
        f"<ul>{items}</ul>",
        curves_svg(report.curves, colours),
        '<p class="muted">Each point is one probe of the search (filled: met the SLO); each '
        "vertical line is one batch's knee, the highest rate confirmed at full duration.</p>",
        "</section>",
    ]
