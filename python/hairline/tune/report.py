"""Tuning runs rendered: a terminal table of every evaluation with the best configuration,
Markdown, and an HTML page whose chart draws each run's objective over its evaluations
(one line per run: searchers side by side)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.table import Table

from hairline import __version__
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
from hairline.tune.results import TuningResult
from hairline.tune.runs import EvaluationRow

__all__ = [
    "infeasible_rule",
    "objective_svg",
    "print_tuning",
    "render_tuning_html",
    "render_tuning_markdown",
]

_W, _H = 640, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 24, 40


def _config_text(config: Mapping[str, object]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def _effect(e: EvaluationRow) -> str:
    if e.effect_rel is None:
        return ""
    interval = ""
    if e.ci_low is not None and e.ci_high is not None:
        interval = f" [{e.ci_low:+.2%}, {e.ci_high:+.2%}]"
    return f"{e.effect_rel:+.2%}{interval}"


def _headline(result: TuningResult) -> str:
    best = result.best
    run = result.run
    head = f"tuning run {run.id} ({run.name}, {run.searcher}) of {run.service}: {run.state}"
    if run.reason:
        head += f" ({run.reason})"
    if best is None:
        return head + f"; nothing beat the default on {result.metric}"
    sure = "" if result.best_significant else " (its interval includes no change)"
    return head + (
        f"; best: evaluation {best.position + 1}, {_config_text(best.config)}: "
        f"{result.metric} {_effect(best)}{sure}"
    )


def print_tuning(result: TuningResult, out: Console) -> None:
    table = Table(title=f"{result.metric} against the default ({_config_text(result.default)})")
    for column in ("#", "batch", "configuration", "status", "effect [CI]", "experiment"):
        table.add_column(column)
    best = result.best
    for e in result.evaluations:
        mark = " *" if best is not None and e.position == best.position else ""
        table.add_row(
            f"{e.position + 1}{mark}",
            str(e.batch),
            _config_text(e.config),
            e.status,
            _effect(e) if e.status == "done" else e.reason[:240],
            "" if e.experiment_id is None else str(e.experiment_id),
        )
    out.print(table)
    out.print(_headline(result), markup=False, highlight=False)
    rule = infeasible_rule(result)
    if rule:
        out.print(rule, markup=False, highlight=False)


def infeasible_rule(result: TuningResult) -> str:
    """The rule that made a candidate infeasible or ran it again, said once under a run that
    has one ("" otherwise): an infeasible candidate is never proposed again, so a reader
    must see what it took."""
    if not any(e.status == "infeasible" or e.candidate_failures for e in result.evaluations):
        return ""
    n = result.infeasible_after_failures
    times = "once" if n == 1 else f"{n} times"
    return (
        f"infeasible (never proposed again): the candidate's own arm failed {times} (to "
        "start, answer or carry the load) where the default's did not, each time in its own "
        f"experiment ([search] infeasible_after_failures = {n}; fewer: run again), or it broke "
        "a [constraints] limit, or its objective was not measured"
    )


def render_tuning_markdown(result: TuningResult) -> str:
    lines = [
        f"### {_headline(result)}",
        "",
        "| # | configuration | status | effect [CI] | experiment |",
        "|---|---|---|---|---|",
    ]
    for e in result.evaluations:
        what = _effect(e) if e.status == "done" else e.reason.replace("|", "/")[:240]
        lines.append(
            f"| {e.position + 1} | `{_config_text(e.config)}` | {e.status} | {what} | "
            f"{e.experiment_id or ''} |"
        )
    rule = infeasible_rule(result)
    if rule:
        lines += ["", rule]
    return "\n".join(lines) + "\n"


def objective_svg(results: Sequence[TuningResult]) -> str:
    """Each run's observations (dots, with their intervals as whiskers) and its best so far
    (a step line), in the objective's better direction (up is better)."""
    series = [(r, r.best_so_far(), r.done) for r in results]
    values = [v for _, steps, _ in series for _, v in steps]
    values += [e.value for _, _, done in series for e in done if e.value is not None]
    if not values:
        return '<p class="muted">No evaluation has finished.</p>'
    low, high = min([*values, 0.0]), max([*values, 0.0])
    pad = (high - low) * 0.1 or 0.01
    low, high = low - pad, high + pad
    n_max = max([len(steps) for _, steps, _ in series] + [1])
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(n: float) -> float:
        return _LEFT + (n - 0.5) / n_max * plot_w

    def y(v: float) -> float:
        return _TOP + (high - v) / (high - low) * plot_h

    base = _TOP + plot_h
    body = [
        *axes_with_zero(_W, _LEFT, _RIGHT, _TOP, base, y(0)),
        text_at(_W - _RIGHT, y(0) - 4, "default", anchor="end"),
        text_at(_LEFT + plot_w / 2, _H - 6, "evaluation"),
        text_at(8, _TOP - 8, "improvement over the default", anchor="start"),
    ]
    for i in range(5):
        v = low + (high - low) * i / 4
        body.append(text_at(_LEFT - 6, y(v) + 4, f"{v:+.1%}", anchor="end"))
    for n in range(1, n_max + 1, max(1, n_max // 10)):
        body.append(text_at(x(n), base + 16, tick_at(n)))
    labels = [f"run {r.run.id} {r.run.searcher}" for r in results]
    colours = arm_colours(labels)
    for label, (_, steps, done) in zip(labels, series, strict=True):
        colour = colours[label]
        path = " ".join(
            f"{'M' if i == 0 else 'L'}{num(x(n - 0.5))},{num(y(v))} H{num(x(n + 0.5))}"
            for i, (n, v) in enumerate(steps)
        )
        body.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for e in done:
            value, n = e.value or 0.0, e.position + 1
            if e.se:
                body.append(
                    f'<line x1="{num(x(n))}" x2="{num(x(n))}" y1="{num(y(value - 2 * e.se))}" '
                    f'y2="{num(y(value + 2 * e.se))}" stroke="{colour}" '
                    'stroke-opacity="0.5"/>'
                )
            body.append(
                f'<circle cx="{num(x(n))}" cy="{num(y(value))}" r="3" fill="{colour}">'
                f"<title>{esc(label)}: evaluation {n}, {esc(_config_text(e.config))}: "
                f"{value:+.2%}</title></circle>"
            )
    body += legend(labels, colours, _W)
    return frame(_W, _H, "the objective over evaluations, per tuning run", body)


def render_tuning_html(results: Sequence[TuningResult]) -> str:
    """One page: the chart of every run, then each run's headline and table."""
    parts = ["<h1>hairline tune</h1>", objective_svg(results)]
    for result in results:
        parts.append(f"<h2>{html.escape(_headline(result))}</h2>")
        rows = "".join(
            f"<tr><td>{e.position + 1}</td><td>{e.batch}</td><td><code>"
            f"{html.escape(_config_text(e.config))}</code></td><td>{e.status}</td><td>"
            f"{html.escape(_effect(e) if e.status == 'done' else e.reason)}</td><td>"
            f"{e.experiment_id or ''}</td></tr>"
            for e in result.evaluations
        )
        parts.append(
            "<table><tr><th>#</th><th>batch</th><th>configuration</th><th>status</th>"
            f"<th>effect [CI]</th><th>experiment</th></tr>{rows}</table>"
        )
        if rule := infeasible_rule(result):
            parts.append(f'<p class="muted">{html.escape(rule)}</p>')
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>hairline tune</title><style>{REPORT_CSS}</style></head><body>\n"
        + "\n".join(parts)
        + f'\n<p class="muted">Written by hairline {html.escape(__version__)}.</p>'
        + "\n</body></html>\n"
    )
