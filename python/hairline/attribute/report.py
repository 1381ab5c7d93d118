"""An attribution rendered: per quantile a table of each term's effect with its interval
and share, where each factor matters, the best treatment for a chosen quantile, the
run's warnings; as terminal tables, Markdown, JSON, and an HTML page whose chart draws each
term's effect across the quantiles (a factor that helps the median and hurts the tail shows
there as a line that crosses zero)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table
from typing_extensions import TypedDict

from hairline import __version__
from hairline.attribute.model import Attribution, Effect
from hairline.kit.jsonout import documented
from hairline.report.html.charts import (
    arm_colours,
    axes_with_zero,
    esc,
    frame,
    legend,
    num,
    text_at,
    tick_at,
)
from hairline.report.html.page import REPORT_CSS

__all__ = [
    "AttributionJson",
    "AttributionReport",
    "attribution_json",
    "effects_svg",
    "print_attribution",
    "quantile_name",
    "render_attribution_html",
    "render_attribution_markdown",
]

_W, _H = 640, 320
_LEFT, _RIGHT, _TOP, _BOTTOM = 72, 16, 28, 40


@dataclass(frozen=True)
class AttributionReport:
    """What a report shows: the model's result and the run around it."""

    name: str
    service: str
    attribution: Attribution
    best_for: float
    experiments: tuple[int, ...] = ()
    warnings: tuple[str, ...] = ()


def quantile_name(q: float) -> str:
    """0.5 -> p50, 0.999 -> p99.9."""
    return "p" + f"{q * 100:.4f}".rstrip("0").rstrip(".")


def _sure(effect: Effect) -> bool:
    """The interval excludes no change."""
    return effect.low_us > 0 or effect.high_us < 0


def _effect_text(effect: Effect) -> str:
    return f"{effect.estimate_us:+,.1f} [{effect.low_us:+,.1f}, {effect.high_us:+,.1f}]"


def where_it_matters(attribution: Attribution) -> dict[str, list[float]]:
    """Each term with the quantiles at which its interval excludes 0."""
    found: dict[str, list[float]] = {}
    for qa in attribution.quantiles:
        for effect in qa.effects:
            found.setdefault(effect.term, [])
            if _sure(effect):
                found[effect.term].append(qa.quantile)
    return found


def _headline(report: AttributionReport) -> str:
    a = report.attribution
    treatments = math.prod(len(levels) for levels in a.factors.values())
    return (
        f"attribution {report.name} of {report.service}: {a.runs} runs of up to "
        f"{treatments} treatments, {a.requests:,} requests; intervals {a.confidence:.0%} "
        f"from {a.bootstrap} resamples of runs"
    )


def _best_text(report: AttributionReport) -> str:
    levels, value = report.attribution.best(report.best_for)
    chosen = " ".join(f"{k}={v}" for k, v in levels.items())
    return f"best for {quantile_name(report.best_for)}: {chosen} ({value:,.1f} us predicted)"


def print_attribution(report: AttributionReport, out: Console) -> None:
    out.print(_headline(report))
    for qa in report.attribution.quantiles:
        table = Table(
            title=f"{quantile_name(qa.quantile)}: {qa.intercept_us:,.1f} us at the "
            "reference levels' average",
        )
        for column in ("term", "effect us [interval]", "share", ""):
            table.add_column(column)
        for effect in qa.effects:
            table.add_row(effect.term, _effect_text(effect), f"{effect.share:.0%}",
                          "*" if _sure(effect) else "")  # fmt: skip
        out.print(table)
    for term, quantiles in where_it_matters(report.attribution).items():
        places = ", ".join(map(quantile_name, quantiles)) or "no quantile"
        out.print(f"  {term}: moves {places}")
    out.print(_best_text(report))
    for warning in report.warnings:
        out.print(f"warning: {warning}", style="yellow", markup=False)


def render_attribution_markdown(report: AttributionReport) -> str:
    lines = [f"### {_headline(report)}", ""]
    for qa in report.attribution.quantiles:
        lines += [
            f"**{quantile_name(qa.quantile)}** ({qa.intercept_us:,.1f} us at the reference "
            "levels' average)",
            "",
            "| term | effect (us) [interval] | share | |",
            "|---|---:|---:|---|",
        ]
        lines += [
            f"| `{e.term}` | {_effect_text(e)} | {e.share:.0%} | {'*' if _sure(e) else ''} |"
            for e in qa.effects
        ]
        lines.append("")
    lines += [
        f"- `{term}` moves {', '.join(map(quantile_name, qs)) or 'no quantile'}"
        for term, qs in where_it_matters(report.attribution).items()
    ]
    lines += ["", f"**{_best_text(report)}**"]
    lines += [f"- warning: {w}" for w in report.warnings]
    return "\n".join(lines) + "\n"


@documented
class EffectJson(TypedDict):
    """One term's effect on a quantile."""

    term: str
    """A factor, or an interaction of factors ("cpu:stall")."""
    estimate_us: float
    """Its coefficient on the quantile, in µs (a two-level factor: from its first level to
    its second, averaged over the others)."""
    low_us: float
    """The effect's interval (the clustered bootstrap over runs)."""
    high_us: float
    share: float
    """Its part of the variance of the fitted quantile."""
    excludes_zero: bool
    """Whether the interval excludes 0."""


@documented
class QuantileJson(TypedDict):
    """One latency quantile's regression on the factors."""

    quantile: float
    intercept_us: float
    """The quantile at the reference levels' average, in µs."""
    effects: list[EffectJson]


@documented
class BestTreatmentJson(TypedDict):
    """The level combination with the lowest predicted ``quantile``."""

    quantile: float
    levels: dict[str, str]
    """Each factor's level."""
    predicted_us: float


@documented
class AttributionJson(TypedDict):
    """An attribution run's result (``hairline attribute --json``, and report.json in its
    folder; docs/attribution.md)."""

    name: str
    service: str
    factors: dict[str, list[str]]
    """Each factor's levels, the reference first."""
    runs: int
    requests: int
    bootstrap: int
    """Resamples of runs behind each interval."""
    confidence: float
    experiments: list[int]
    """The experiments that measured the runs."""
    quantiles: list[QuantileJson]
    best: BestTreatmentJson
    warnings: list[str]


def attribution_json(report: AttributionReport) -> AttributionJson:
    a = report.attribution
    levels, value = a.best(report.best_for)
    return {
        "name": report.name,
        "service": report.service,
        "factors": {k: list(v) for k, v in a.factors.items()},
        "runs": a.runs,
        "requests": a.requests,
        "bootstrap": a.bootstrap,
        "confidence": a.confidence,
        "experiments": list(report.experiments),
        "quantiles": [
            {
                "quantile": qa.quantile,
                "intercept_us": qa.intercept_us,
                "effects": [
                    {
                        "term": e.term,
                        "estimate_us": e.estimate_us,
                        "low_us": e.low_us,
                        "high_us": e.high_us,
                        "share": e.share,
                        "excludes_zero": _sure(e),
                    }
                    for e in qa.effects
                ],
            }
            for qa in a.quantiles
        ],
        "best": {"quantile": report.best_for, "levels": levels, "predicted_us": value},
        "warnings": list(report.warnings),
    }


def effects_svg(attribution: Attribution) -> str:
    """Each term's effect (a line) at each quantile (evenly spaced), with its interval as
    a whisker; the dashed line is no change."""
    quantiles = [qa.quantile for qa in attribution.quantiles]
    terms = [e.term for e in attribution.quantiles[0].effects] if quantiles else []
    points = [(e.low_us, e.high_us) for qa in attribution.quantiles for e in qa.effects]
    if not points:
        return '<p class="muted">Nothing to draw.</p>'
    low = min([0.0, *(p[0] for p in points)])
    high = max([0.0, *(p[1] for p in points)])
    pad = (high - low) * 0.08 or 1.0
    low, high = low - pad, high + pad
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(i: int) -> float:
        return _LEFT + (i + 0.5) / len(quantiles) * plot_w

    def y(v: float) -> float:
        return _TOP + (high - v) / (high - low) * plot_h

    base = _TOP + plot_h
    body = [
        *axes_with_zero(_W, _LEFT, _RIGHT, _TOP, base, y(0)),
        text_at(_LEFT + plot_w / 2, _H - 6, "quantile of latency"),
        text_at(8, _TOP - 10, "effect on the quantile (us)", anchor="start"),
    ]
    for i in range(5):
        v = low + (high - low) * i / 4
        body.append(text_at(_LEFT - 6, y(v) + 4, tick_at(round(v, 1)), anchor="end"))
    for i, q in enumerate(quantiles):
        body.append(text_at(x(i), base + 16, quantile_name(q)))
    colours = arm_colours(terms)
    offset = plot_w / len(quantiles) / (len(terms) + 2)
    for k, term in enumerate(terms):
        colour = colours[term]
        shift = (k - (len(terms) - 1) / 2) * offset
        series = [
            (i, next(e for e in qa.effects if e.term == term))
            for i, qa in enumerate(attribution.quantiles)
        ]
        path = " ".join(
            f"{'M' if n == 0 else 'L'}{num(x(i) + shift)},{num(y(e.estimate_us))}"
            for n, (i, e) in enumerate(series)
        )
        body.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for i, e in series:
            cx = num(x(i) + shift)
            body.append(
                f'<line x1="{cx}" x2="{cx}" y1="{num(y(e.low_us))}" y2="{num(y(e.high_us))}" '
                f'stroke="{colour}" stroke-opacity="0.6"/>'
                f'<circle cx="{cx}" cy="{num(y(e.estimate_us))}" r="3" fill="{colour}">'
                f"<title>{esc(term)} at {quantile_name(quantiles[i])}: "
                f"{esc(_effect_text(e))} us</title></circle>"
            )
    body += legend(terms, colours, _W)
    return frame(_W, _H, "each term's effect across quantiles", body)


def render_attribution_html(report: AttributionReport) -> str:
    parts = [f"<h1>{html.escape(_headline(report))}</h1>", effects_svg(report.attribution)]
    parts.append(f"<p><strong>{html.escape(_best_text(report))}</strong></p>")
    for qa in report.attribution.quantiles:
        rows = "".join(
            f"<tr><td><code>{html.escape(e.term)}</code></td><td>{html.escape(_effect_text(e))}"
            f"</td><td>{e.share:.0%}</td><td>{'*' if _sure(e) else ''}</td></tr>"
            for e in qa.effects
        )
        parts.append(
            f"<h2>{quantile_name(qa.quantile)}: {qa.intercept_us:,.1f} us</h2><table><tr>"
            f"<th>term</th><th>effect (us) [interval]</th><th>share</th><th></th></tr>"
            f"{rows}</table>"
        )
    if report.warnings:
        items = "".join(f"<li>{html.escape(w)}</li>" for w in report.warnings)
        parts.append(f"<h2>Warnings</h2><ul>{items}</ul>")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>hairline attribute</title><style>{REPORT_CSS}</style></head><body>\n"
        + "\n".join(parts)
        + f'\n<p class="muted">Written by hairline {html.escape(__version__)}.</p>'
        + "\n</body></html>\n"
    )
