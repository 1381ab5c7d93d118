"""An experiment as one self-contained HTML file: inline CSS and SVG, no scripts, no URLs.

The page reads top to bottom: the headline (and the failure, if any), a summary table of
every metric, then per metric the effect with its interval drawn against the threshold
band, the p-value, the model and why it was chosen, the per-trial values of every arm (a
chart and a table), and for time series (per-request rows over ``t``) the series per arm
with the warm-up cut marked. Setup and host facts close the page.

The charts are SVG (:mod:`hairline.report.html.charts`). Every piece of text is escaped;
nothing is fetched from anywhere.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime

from hairline import __version__
from hairline.lab.analysis import MetricAnalysis
from hairline.lab.functions import FunctionAnalysis
from hairline.profile.flame import flame_layout
from hairline.report.context import (
    FUNCTION_HEADER,
    SUGGESTED_MARK,
    ExperimentReport,
    MetricTrials,
    TrialValue,
    aa_text,
    certificate_of,
    certificate_sentence,
    certificates,
    deciding_text,
    effect_text,
    function_lines,
    function_summary,
    headline,
    mde_text,
    metric_trials,
    number_text,
    overlap_notes,
    suggested_in,
    suggested_summary,
    threshold_text,
)
from hairline.report.html.charts import (
    arm_colours,
    interval_svg,
    series_svg,
    trial_name,
    trial_order,
    trials_svg,
)
from hairline.report.html.curves import capacity_section
from hairline.report.html.flamegraph import FLAME_WIDTH_PX, MIN_FRAME_PX, flame_svg
from hairline.stats.certificate import Certificate

__all__ = ["REPORT_CSS", "render_html", "report_body"]

# Metric names this long or shorter never wrap in the verdict table (cpu_ns_per_request is
# 18, anon_memory_bytes 17; the sample service's per-endpoint counters are over 45).
WHOLE_NAME_CHARS = 24

# The report's style; the dashboard's experiment page includes it with report_body().
REPORT_CSS = """
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
/* The verdict table fits the page with its certificate columns (A/A flagged, detects) on
   screen: numbers and the A/A record never wrap; long names, thresholds and intervals may
   (an interval at its ", " only when the row needs the room: a fresh clone's run had
   intervals wide enough to push "detects" behind the scroll bar). */
table.verdicts{font-size:13px}table.verdicts th,table.verdicts td{padding:3px 7px}
table.verdicts td{white-space:nowrap}table.verdicts td.wrap{white-space:normal}
.over{color:#b45309;font-weight:700}
.v-regression{color:#b91c1c;font-weight:700}.v-improvement{color:#15803d;font-weight:600}
.v-no-change{color:#4b5563}.v-inconclusive{color:#b45309;font-weight:600}
.cmp{margin:6px 0 2px}.cmp b{font-size:15px}
svg{display:block;max-width:100%;height:auto}
svg text{font:11px system-ui,sans-serif;fill:#4b5563}
details summary{cursor:pointer;color:#374151}
.suggested{color:#111827;font-weight:700}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _slug(label: str) -> str:
    return label.replace(" ", "-")


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
    for label in trial_order(trials):
        cells = by_trial[label]
        row = [f'<td class="l">{_e(trial_name(label))}</td>']
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
    if report.overlaps:
        items = "".join(f"<li>{_e(note)}</li>" for note in overlap_notes(report.overlaps))
        parts.append(f'<ul class="notes overlaps">{items}</ul>')
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
    many = len(candidates) > 1
    mean_b = "candidate" if many else candidates[0]
    chained = analysis.chained
    # One candidate: its column of means is headed with its name, so no "arm" column (as
    # in Markdown): the room goes to the certificate's columns.
    head = ["metric", *(["arm"] if many else []), *(["against"] if chained else [])]
    head += ["baseline" if chained else analysis.baseline, mean_b, "effect", "CI", p_header]
    head += ["threshold", "verdict", "A/A flagged", "detects"]
    certs = certificates(analysis, report.aa_records)
    left = ("metric", "arm", "against", "verdict", "A/A flagged")
    rows = [
        "<tr>"
        + "".join(f'<th class="{"l" if h in left else ""}">{_e(h)}</th>' for h in head)
        + "</tr>"
    ]
    for r in analysis.results:
        effect, interval = effect_text(r)
        arm = f'<td class="l">{_e(r.candidate)}</td>' if many else ""
        against = f'<td class="l">{_e(r.baseline)}</td>' if chained else ""
        rows.append(
            f'<tr><td class="l wrap"><a href="#{anchors[r.metric]}">{_name(r.metric)}</a></td>'
            f"{arm}{against}"
            f"<td>{_e(number_text(r.comparison.mean_a))}</td>"
            f"<td>{_e(number_text(r.comparison.mean_b))}</td>"
            f'<td>{_e(effect)}</td><td class="wrap">{_e(interval)}</td>'
            f"<td>{_e(_p(r.verdict.p_adjusted))}</td>"
            f'<td class="wrap">{_e(threshold_text(r))}</td>'
            f'<td class="l">{_verdict(r.verdict.label)}</td>'
            f'<td class="l">{_aa_cell(cert := certs[(r.metric, r.candidate)])}</td>'
            f"<td>{_e(mde_text(cert))}</td></tr>"
        )
    against = "its baseline" if chained else analysis.baseline
    parts = [
        f"<h2>Metrics: each arm against {_e(against)}</h2>",
        f'<p class="meta">alpha {analysis.alpha:g}, correction {_e(analysis.correction)}; '
        f"effects and intervals are relative (%) for relative thresholds, in the metric's "
        f"units for absolute ones. <i>A/A flagged</i>: the metric's false positives on this "
        f"service's A/A runs, and the count alpha explains; <i>detects</i>: the smallest "
        f"change this experiment finds with 80% power.</p>",
        '<table class="verdicts">' + "".join(rows) + "</table>",
    ]
    if chained:
        parts.append(f"<p><b>{_e(deciding_text(analysis))}</b></p>")
    return parts


def _name(metric: str) -> str:
    """A long metric's name that may wrap after ``_`` and before ``[`` or ``/``, so that
    the verdict table fits the page with its certificate columns on screen (kept whole,
    ``sample_downstream_reads_total[/api/profile]_per_request`` pushed them behind the
    table's scroll bar at 1,000 px). Names of up to WHOLE_NAME_CHARS stay whole: a
    ``latency_p50_`` over ``us`` reads worse than the room it saves."""
    text = _e(metric)
    if len(metric) <= WHOLE_NAME_CHARS:
        return text
    return text.replace("_", "_<wbr>").replace("[", "<wbr>[").replace("/", "<wbr>/")


def _aa_cell(cert: Certificate) -> str:
    """The A/A record (``0/2 (0-1 expected)``), its ``over`` marked."""
    text, over, _ = aa_text(cert).partition(": over")
    return _e(text) + (': <span class="over">over</span>' if over else "")


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
        interval_svg(result),
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
        sentence = certificate_sentence(certificate_of(r, report.aa_records))
        parts.append(f'<p class="meta cert">Certificate: {_e(sentence)}</p>')
    if trials is not None and trials.by_arm:
        if report.analysis is not None:
            pairs = list(report.analysis.comparisons)
        else:
            first, *others = trials.by_arm
            pairs = [(arm, first) for arm in others]
        parts += [
            "<h3>Per trial</h3>",
            f"<figure>{trials_svg(trials, colours)}<figcaption>Each arm's mean per trial"
            + (", after the warm-up cut" if trials.rows_cut else "")
            + "; the arms of a trial ran side by side.</figcaption></figure>",
            _trials_table(trials, pairs),
        ]
        if trials.series and report.observations is not None:
            svg, caption = series_svg(report.observations, trials, colours)
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


def _flame(report: ExperimentReport, analysis: FunctionAnalysis) -> list[str]:
    """The differential flame graph of one candidate, or why there is none."""
    baseline = report.flame_stacks.get(analysis.baseline)
    candidate = report.flame_stacks.get(analysis.candidate)
    if not baseline or not candidate:
        return ['<p class="muted">No flame graph: the batches\' folded stacks '
                "(runs/*.folded) are not in the experiment's folder.</p>"]  # fmt: skip
    layout = flame_layout(baseline, candidate, min_fraction=MIN_FRAME_PX / FLAME_WIDTH_PX)
    names = {c.function for c in analysis.changes}
    names |= layout.baseline_functions | layout.candidate_functions
    suggested = suggested_in(names, report.suggested_functions)
    svg = flame_svg(layout, analysis, suggested=suggested)
    if not svg:
        return []
    marked = (
        " A black outline marks a function the diff suggester named (--suggested-by)."
        if suggested
        else ""
    )
    return [
        f'<figure class="flame">{svg}<figcaption>{_e(analysis.candidate)} against '
        f"{_e(analysis.baseline)}, every batch's stacks merged: a frame's width is the CPU "
        "per request on its path (the mean of both arms, each in ns per request), its colour "
        "its function's self cost verdict: red slower, blue faster, saturated only when "
        "significant after Benjamini-Hochberg, pale when not, grey when not tested. Dashed "
        "outlines: new (red) and gone (blue) functions. Frames under 1 px are pooled. Hover "
        f"a frame for its numbers.{_e(marked)}</figcaption></figure>"
    ]


def _functions(report: ExperimentReport) -> list[str]:
    """The functions that changed ([service.profile]), or why there are none, and each
    candidate's differential flame graph."""
    if not report.functions and not report.functions_note:
        return []
    parts = ["<h2>Functions that changed</h2>"]
    if report.functions_note:
        parts.append(f'<p class="muted">{_e(report.functions_note)}</p>')
    left = ("function", "cost", "verdict")
    for analysis in report.functions:
        parts.append(f'<p class="meta">{_e(function_summary(analysis))}</p>')
        marked = suggested_in({c.function for c in analysis.changes}, report.suggested_functions)
        found = list(function_lines(analysis, marked))
        if found:
            head = "".join(f'<th class="{"l" if h in left else ""}">{_e(h)}</th>'
                           for h in FUNCTION_HEADER)  # fmt: skip
            mark = (f'<span class="suggested" title="named by the diff suggester">'
                    f"{SUGGESTED_MARK}</span>&nbsp;")  # fmt: skip
            rows = [
                "<tr>"
                + '<td class="l">'
                + (mark if line.suggested else "")
                + f"<code>{_e(line.cells[0])}</code></td>"
                + f'<td class="l">{_e(line.cells[1])}</td>'
                + "".join(f"<td>{_e(c)}</td>" for c in line.cells[2:6])
                + f'<td class="l">{_verdict(line.verdict)}'
                + f"{_e(line.cells[6][len(line.verdict) :])}</td>"
                + "</tr>"
                for line in found
            ]
            parts.append("<table><tr>" + head + "</tr>" + "".join(rows) + "</table>")
        if sentence := suggested_summary(analysis, report.suggested_functions):
            parts.append(f'<p class="meta">{_e(sentence)}</p>')
        parts += _flame(report, analysis)
    return parts


def report_body(report: ExperimentReport) -> str:
    """The report's sections as HTML to place in a page (the dashboard's, or its own)."""
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
    colours = arm_colours(arm_names)
    body = [*_header(report), *_summary(report, anchors), *capacity_section(report, colours)]
    body += _functions(report)
    for metric in metrics:
        body += _metric_section(report, metric, anchors[metric], trials.get(metric), colours)
    if not metrics:
        body.append('<p class="muted">Nothing was measured.</p>')
    body += _setup(report)
    return "\n".join(body)


def render_html(report: ExperimentReport) -> str:
    """The whole report as one HTML document (a string; the caller writes it)."""
    title = f"hairline: {report.service} #{report.experiment_id}: {headline(report).text}"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{REPORT_CSS}</style></head><body>\n"
        + report_body(report)
        + f'\n<p class="muted">Written by hairline {_e(__version__)}.</p>'
        + "\n</body></html>\n"
    )
