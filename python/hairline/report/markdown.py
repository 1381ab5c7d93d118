"""An experiment as a compact Markdown comment, ready for a pull request or a CI summary.

Layout: a headline (regression found / no regression / inconclusive / failed: reason), the
table of metrics, which models were chosen and why, the setup folded in a ``<details>``
block, and where the HTML report is. GitHub renders HTML inside Markdown, so every piece of
text that comes from users (service names, failure reasons, sources, metric names) is
escaped: a failure reason with ``<script>`` in it stays text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from hairline.errors import ConfigError
from hairline.lab.analysis import MetricAnalysis
from hairline.report.context import (
    FUNCTION_HEADER,
    SUGGESTED_MARK,
    ExperimentReport,
    aa_text,
    certificates,
    comparison_text,
    deciding_text,
    effect_text,
    function_lines,
    function_summary,
    headline,
    mde_text,
    number_text,
    overlap_notes,
    suggested_in,
    suggested_summary,
    threshold_text,
)

__all__ = ["append_step_summary", "render_markdown"]

# Backslash-escaping ASCII punctuation is always literal in CommonMark/GFM; these are the
# characters that could start markup, a link, an HTML tag, an entity or break a table cell
# anywhere in a line (user text never starts a line here, so # + - need no escape).
_MARKUP = re.compile(r"([\\`*_\[\]<>|~&])")
_MARKER = {
    "regression": "**regression**",
    "improvement": "improvement",
    "no change": "no change",
    "inconclusive": "*inconclusive*",
}
# A headline reason longer than this goes whole into a code block below it.
_HEADLINE_CHARS = 200


def _text(value: object) -> str:
    """User text as literal Markdown on one line."""
    return _MARKUP.sub(r"\\\1", " ".join(str(value).split()))


def _code(value: object) -> str:
    """A code span that survives backticks inside and ``|`` in a table cell."""
    text = " ".join(str(value).split()).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _block(text: str) -> str:
    """A fenced code block longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}"


def _p(x: float) -> str:
    return "n/a" if x != x else f"{x:.3g}"


def _metrics_table(report: ExperimentReport) -> list[str]:
    analysis = report.analysis
    assert analysis is not None
    many = len({r.candidate for r in analysis.results}) > 1
    chained = analysis.chained
    # Chained comparisons (three-sided) have a baseline per row: name it in a column.
    base = "baseline" if chained else analysis.baseline
    p_header = "p" if analysis.correction == "none" else f"p ({analysis.correction})"
    candidate = "candidate" if many else analysis.results[0].candidate
    header = ["metric", *(["arm"] if many else []), *(["against"] if chained else [])]
    header += [base, candidate, "effect", "CI", p_header, "threshold", "verdict"]
    header += ["A/A flagged", "detects"]
    lines = [
        "| " + " | ".join(_text(h) for h in header) + " |",
        "|"
        + "|".join(
            "---:" if h not in ("metric", "arm", "against", "verdict", "A/A flagged") else "---"
            for h in header
        )
        + "|",
    ]
    certs = certificates(analysis, report.aa_records)
    for r in analysis.results:
        c = r.comparison
        effect, interval = effect_text(r)
        cert = certs[(r.metric, r.candidate)]
        cells = [
            _code(r.metric),
            *([_text(r.candidate)] if many else []),
            *([_text(r.baseline)] if chained else []),
            number_text(c.mean_a),
            number_text(c.mean_b),
            effect,
            interval,
            _p(r.verdict.p_adjusted),
            threshold_text(r),
            _MARKER[r.verdict.label],
            _text(aa_text(cert)),
            mde_text(cert),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "*A/A flagged*: the metric's false positives on this service's A/A runs, and the "
        "count alpha explains. *detects*: the smallest change this experiment finds with "
        "80% power.",
    ]
    return lines


def _model_notes(results: tuple[MetricAnalysis, ...]) -> list[str]:
    """One line per (model, reason), naming the metrics it applies to."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in results:
        groups.setdefault((r.model, r.model_reason), []).append(r.metric)
    every = len({r.metric for r in results})
    lines = []
    for (model, reason), metrics in groups.items():
        unique = list(dict.fromkeys(metrics))
        names = (
            ("both metrics" if every == 2 else f"all {every} metrics")
            if len(groups) == 1 and every > 1
            else ", ".join(_code(m) for m in unique)
        )
        lines.append(f"- {_code(model)} for {names}: {_text(reason)}")
    return lines


def _notes(results: tuple[MetricAnalysis, ...], *, chained: bool) -> list[str]:
    """Warm-up cuts and model warnings, one line per distinct note naming its metrics."""
    many = len({r.candidate for r in results}) > 1
    groups: dict[str, list[str]] = {}
    for r in results:
        arm = comparison_text(r) if chained else r.candidate
        name = _code(r.metric) + (f" ({_text(arm)})" if many or chained else "")
        if r.warmup_rows_cut:
            groups.setdefault(f"warm-up cut: {r.warmup_rows_cut} rows", []).append(name)
        for warning in r.comparison.warnings:
            groups.setdefault(warning, []).append(name)
    return [f"- {', '.join(names)}: {_text(note)}" for note, names in groups.items()]


def _setup(report: ExperimentReport) -> list[str]:
    kind = "A/A" if report.kind == "aa" else "A/B"
    lines = [
        f"- service: {_text(report.service)}, experiment {report.experiment_id} ({kind}), "
        f"phase {_text(report.phase)}",
        f"- design: {_text(report.design)}, {report.trials_done} of {report.trials} trials, "
        f"{report.rate_per_s:g} requests/s for {report.duration_s:g} s per batch",
        f"- model: {_text(report.model)}",
    ]
    if report.analysis is not None:
        lines.append(
            f"- alpha {report.analysis.alpha:g}, correction {_text(report.analysis.correction)}"
        )
    for arm in report.arms:
        build = ""
        if arm.build_key is not None:
            cached = " (cached)" if arm.build_cached else ""
            build = f", build {_code(arm.build_key[:12])}{cached}"
        setup = f"; {_code(arm.setup)}" if arm.setup else ""
        against = f"; against {_text(arm.baseline)}" if report.chained and arm.baseline else ""
        lines.append(f"- arm {_text(arm.name)}: {_text(arm.source)}{build}{setup}{against}")
    for host in report.hosts:
        facts = "; ".join(f"{_text(k)} {_text(v)}" for k, v in host.facts.items())
        lines.append(f"- host {host.host}: {_text(host.where)}" + (f" ({facts})" if facts else ""))
    if report.analysis is not None:
        lines += _notes(report.analysis.results, chained=report.analysis.chained)
    return lines


def _functions(report: ExperimentReport) -> list[str]:
    """The functions that changed ([service.profile]), or why there are none."""
    lines: list[str] = []
    if report.functions_note:
        lines += ["", f"> {_text(report.functions_note)}"]
    for analysis in report.functions:
        lines += ["", f"**Functions**: {_text(function_summary(analysis))}"]
        marked = suggested_in({c.function for c in analysis.changes}, report.suggested_functions)
        found = list(function_lines(analysis, marked))
        if found:
            lines += [
                "",
                "| " + " | ".join(FUNCTION_HEADER) + " |",
                "|"
                + "|".join(
                    "---" if h in ("function", "cost", "verdict") else "---:"
                    for h in FUNCTION_HEADER
                )
                + "|",
                *(
                    "| "
                    + " | ".join(
                        [
                            (f"{SUGGESTED_MARK} " if line.suggested else "") + _code(line.cells[0]),
                            *map(_text, line.cells[1:]),
                        ]
                    )
                    + " |"
                    for line in found
                ),
            ]
        if sentence := suggested_summary(analysis, report.suggested_functions):
            lines += ["", _text(sentence)]
    return lines


def render_markdown(report: ExperimentReport) -> str:
    """The experiment as a PR comment: headline, metrics table, model notes, setup."""
    head = headline(report)
    title = head.text
    if len(title) > _HEADLINE_CHARS:
        title = title[: _HEADLINE_CHARS - 1].rstrip() + "…"
    kind = "A/A" if report.kind == "aa" else "A/B"
    lines = [
        f"### hairline: {_text(title)}",
        "",
        f"{_text(report.service)} · experiment {report.experiment_id} · {kind} · "
        f"{report.trials_done} of {report.trials} trials · {_text(report.phase)}",
    ]
    failure = (report.failure or "").strip()
    if head.status == "failed" and (len(failure.splitlines()) > 1 or title != head.text):
        lines += ["", _block(failure)]
    if report.overlaps:
        lines += ["", *(f"> **{_text(note)}**" for note in overlap_notes(report.overlaps))]
    if report.notes:
        lines += ["", *(f"> {_text(note)}" for note in report.notes)]
    analysis = report.analysis
    if analysis is not None and analysis.results:
        lines += ["", *_metrics_table(report)]
        if analysis.chained:
            lines += ["", _text(deciding_text(analysis))]
        lines += ["", "Models:", "", *_model_notes(analysis.results)]
    lines += _functions(report)
    lines += ["", "<details><summary>Setup</summary>", "", *_setup(report), "", "</details>"]
    if report.html_path is not None:
        lines += ["", f"HTML report: {_code(report.html_path)}"]
    return "\n".join(lines) + "\n"


def append_step_summary(markdown: str, env: Mapping[str, str] = os.environ) -> Path | None:
    """Append ``markdown`` to ``$GITHUB_STEP_SUMMARY`` when it is set; the path or None."""
    target = env.get("GITHUB_STEP_SUMMARY", "").strip()
    if not target:
        return None
    path = Path(target)
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(markdown if markdown.endswith("\n") else markdown + "\n")
    except OSError as err:
        raise ConfigError(
            f"GITHUB_STEP_SUMMARY={target}: cannot append the summary: {err.strerror or err}",
            hint="point GITHUB_STEP_SUMMARY at a writable file, or unset it",
        ) from None
    return path
