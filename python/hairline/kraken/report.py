"""A Kraken run's reports: a terminal summary (rich), JSON (the contract scripts read) and
one self-contained HTML file with SVG plots: the share and load over time, each health
metric against its level bands, the latency breakdown over load (Figure 8b) and measured
against theoretical capacity (Figure 8a).

The HTML follows the lab report's look (report/html) but draws its own charts
(kraken/charts.py): that package's are made for the lab's analysis.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from typing_extensions import TypedDict

from hairline.kit.jsonout import documented, to_jsonable, write_json
from hairline.kraken.charts import Points, line_chart
from hairline.kraken.results import (
    COMPONENTS,
    SERVICE_COMPONENTS,
    Bottleneck,
    KrakenResult,
    PhaseResult,
    Step,
    sustained_per_s,
)

__all__ = [
    "KrakenJson",
    "bottleneck_text",
    "print_summary",
    "progress_line",
    "render_html",
    "result_json",
    "write_reports",
]

_LEVEL_COLOURS = ("#dcfce7", "#ecfccb", "#fef9c3", "#fed7aa", "#fecaca")
_LEVELS = ("BOLD", "MODERATE", "CAUTIOUS", "NOMORE", "BACKOFF")
_COMPONENT_COLOURS = {"queue": "#dc2626", "work": "#2563eb", "cache": "#d97706"}


def _n(x: float | None, digits: int = 0) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:,.{digits}f}"


def progress_line(phase: str, step: Step) -> str:
    """One control interval as a line: what was decided and why."""
    levels = " ".join(f"{k}={v or 'none'}" for k, v in step.levels.items())
    return (
        f"[{phase}] t={step.t_s:5.1f}s share {step.share:6.1%} -> {step.next_share:6.1%} "
        f"{step.action:<8} served {_n(step.served_per_s)}/s of {_n(step.offered_per_s)}/s  "
        f"{levels}  ({step.reason})"
    )


@documented
class KrakenJson(TypedDict):
    """A Kraken run (``hairline kraken --json``; docs/kraken.md, "Results")."""

    kraken: int
    """The document's version."""
    file: str
    """The test file."""
    kind: str
    """"cluster" or "server"."""
    found: bool
    """Finished, with a capacity: exit status 0."""
    aborted: bool
    stopped_by: str
    """Why the test stopped, in words."""
    stop_metric: str | None
    """The health metric that stopped it."""
    measured_capacity_per_s: float | None
    """A cluster test: the most a healthy control interval sustained; a server test: the
    mean of the servers' capacities."""
    per_server_capacity_per_s: float | None
    theoretical_capacity_per_s: float | None
    """The per-server capacity times the servers."""
    fraction_of_theoretical: float | None
    queue_limit_ms: float
    bottleneck: str | None
    """The component whose share of the servers' service time grew most (work or cache)."""
    weights_restored: bool
    """Whether every test put the original weights back."""
    notes: list[str]
    test: PhaseResult
    """The test the file asks for."""
    server_test: PhaseResult | None
    """The server test run first for the theoretical capacity, if one was."""


def result_json(result: KrakenResult) -> dict[str, Any]:
    """The JSON document of a run (``hairline kraken --json``): a :class:`KrakenJson`, plain."""
    test = result.test
    bottleneck = test.bottleneck
    payload: KrakenJson = {
        "kraken": 1,
        "file": result.file,
        "kind": result.kind,
        "found": result.found,
        "aborted": result.aborted,
        "stopped_by": test.stopped_by,
        "stop_metric": test.stop_metric,
        "measured_capacity_per_s": result.measured_capacity_per_s,
        "per_server_capacity_per_s": result.per_server_capacity_per_s,
        "theoretical_capacity_per_s": result.theoretical_capacity_per_s,
        "fraction_of_theoretical": result.fraction_of_theoretical,
        "queue_limit_ms": result.queue_limit_ms,
        "bottleneck": None if bottleneck is None else bottleneck.component,
        "weights_restored": result.restored,
        "notes": [*result.notes, *test.notes],
        "test": test,
        "server_test": result.server_test,
    }
    plain: dict[str, Any] = to_jsonable(payload)
    return plain


def print_summary(result: KrakenResult, console: Console) -> None:
    test = result.test
    status = "aborted" if result.aborted else "finished"
    console.print(f"[bold]Kraken {result.kind} test[/bold] ({result.file}): {status}")
    console.print(f"  stopped by: {test.stopped_by}")
    table = Table(show_header=False, box=None, padding=(0, 2))
    if result.kind == "cluster":
        table.add_row("measured capacity", f"{_n(result.measured_capacity_per_s)} req/s")
        table.add_row("per-server capacity", f"{_n(result.per_server_capacity_per_s)} req/s")
        table.add_row(
            "theoretical capacity",
            f"{_n(result.theoretical_capacity_per_s)} req/s ({len(test.servers)} servers)",
        )
        fraction = result.fraction_of_theoretical
        table.add_row(
            "of theoretical", "-" if fraction is None else f"{fraction:.0%} (Kraken aims at 93%)"
        )
    else:
        for c in test.server_capacities:
            table.add_row(
                f"{c.server} at {result.queue_limit_ms:g} ms queueing",
                f"- ({c.queueing_unmeasured})"
                if c.queueing_unmeasured
                else f"{_n(c.capacity_per_s)} req/s",
            )
        table.add_row("per-server capacity (mean)", f"{_n(result.measured_capacity_per_s)} req/s")
    if test.bottleneck is not None:
        table.add_row("bottleneck", bottleneck_text(test.bottleneck))
    table.add_row("weights restored", "yes" if result.restored else "NO (the watchdog acts)")
    console.print(table)
    for note in (*result.notes, *test.notes):
        console.print(f"  note: {note}")


def bottleneck_text(b: Bottleneck) -> str:
    """The bottleneck and the shares that named it: of the servers' service time (work and
    cache wait, which hold a worker), and the queueing they cause."""
    start, end = b.start.shares(SERVICE_COMPONENTS), b.end.shares(SERVICE_COMPONENTS)
    shares = ", ".join(f"{c} {start[c]:.0%} -> {end[c]:.0%}" for c in SERVICE_COMPONENTS)
    return (
        f"{b.component} (share of service time {shares}; mean queueing "
        f"{b.start.queue_ms:.1f} -> {b.end.queue_ms:.1f} ms)"
    )


# ---------------------------------------------------------------------------- HTML


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _phase_charts(phase: PhaseResult, result: KrakenResult, name: str) -> list[str]:
    samples, steps = phase.samples, phase.steps
    out = [f"<h2>{_e(name)}: servers {_e(', '.join(phase.servers))}</h2>"]
    out.append(
        f"<p>Stopped by: {_e(phase.stopped_by)}. Weights restored: "
        f"{'yes' if phase.restored else 'no (the watchdog acts)'}.</p>"
    )
    share = [(s.t_s, 100 * s.share) for s in samples]
    out.append(
        line_chart(
            "Share of the users' traffic on the system under test",
            [("share %", "#2563eb", share)],
            x_label="seconds",
            y_label="% of traffic",
            y_max=100.0,
        )
    )
    served = [(s.t_s, s.served_per_s) for s in samples if s.served_per_s is not None]
    offered = [(s.t_s, s.share * s.user_rate_per_s) for s in samples]
    out.append(
        line_chart(
            "Load on the system under test",
            [("offered", "#9ca3af", offered), ("served", "#16a34a", served)],
            x_label="seconds",
            y_label="requests/s",
            dashed=frozenset({"offered"}),
        )
    )
    for metric, ranges in phase.metric_ranges.items():
        values = [(s.t_s, v) for s in samples if (v := s.values.get(metric)) is not None]
        top = max([v for _, v in values] + [ranges[3][0]]) * 1.15 if ranges else None
        bands = [(lo, hi, _LEVEL_COLOURS[i], _LEVELS[i]) for i, (lo, hi) in enumerate(ranges)]
        out.append(
            line_chart(
                f"Health metric {metric}",
                [(metric, "#111827", values)],
                x_label="seconds",
                y_label=metric,
                bands=bands,
                y_max=top,
            )
        )
    with_breakdown = [s for s in steps if s.breakdown is not None and s.served_per_s]
    if with_breakdown:
        series = []
        for c in COMPONENTS:
            pts = sorted(
                (sustained_per_s(s), 100 * s.breakdown.shares()[c])
                for s in with_breakdown
                if s.breakdown is not None
            )
            series.append((c, _COMPONENT_COLOURS[c], pts))
        out.append(
            line_chart(
                "Latency breakdown over load (share of the servers' latency)",
                series,
                x_label="load on the system under test (requests/s)",
                y_label="% of latency",
                y_max=100.0,
            )
        )
    return out


def _capacity_chart(result: KrakenResult) -> str:
    """Figure 8a: served against offered load, beside theoretical capacity."""
    steps = result.test.steps
    measured = sorted((s.offered_per_s, s.served_per_s or 0.0) for s in steps)
    theoretical = result.theoretical_capacity_per_s
    series: list[tuple[str, str, Points]] = [("measured", "#16a34a", measured)]
    if theoretical is not None and measured:
        top = max(max(x for x, _ in measured), theoretical)
        series.append(
            ("theoretical", "#6b7280", [(0.0, 0.0), (theoretical, theoretical), (top, theoretical)])
        )
    return line_chart("Measured against theoretical capacity", series,
                  x_label="offered load (requests/s)", y_label="served (requests/s)",
                  dashed=frozenset({"theoretical"}))  # fmt: skip


_CSS = """
body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;color:#111827}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em}
table{border-collapse:collapse}td,th{padding:2px 10px;text-align:left}
tr:nth-child(even){background:#f3f4f6}
svg{display:block;margin:1em 0}.t{font-size:13px;font-weight:600}
.s{font-size:11px;fill:#374151}.g{stroke:#e5e7eb}
"""


def render_html(result: KrakenResult) -> str:
    test = result.test
    rows = [
        ("stopped by", test.stopped_by),
        ("measured capacity", f"{_n(result.measured_capacity_per_s)} req/s"),
        ("per-server capacity", f"{_n(result.per_server_capacity_per_s)} req/s"),
        ("theoretical capacity", f"{_n(result.theoretical_capacity_per_s)} req/s"),
        (
            "of theoretical",
            "-" if result.fraction_of_theoretical is None
            else f"{result.fraction_of_theoretical:.0%}",
        ),
        ("bottleneck", bottleneck_text(test.bottleneck) if test.bottleneck else "-"),
    ]  # fmt: skip
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>Kraken: {_e(result.file)}"
        f"</title><style>{_CSS}</style></head><body>",
        f"<h1>Kraken {_e(result.kind)} test: {'aborted' if result.aborted else 'finished'}</h1>",
        f"<p>{_e(result.file)}</p><table>",
        *(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows),
        "</table>",
        *(f"<p>Note: {_e(n)}</p>" for n in (*result.notes, *test.notes)),
    ]
    if result.kind == "cluster":
        parts.append(_capacity_chart(result))
    parts += _phase_charts(test, result, f"{result.kind.capitalize()} test")
    if result.server_test is not None:
        parts += _phase_charts(result.server_test, result, "Server test (per-server capacity)")
    parts += _steps_table(test.steps)
    parts.append("</body></html>")
    return "\n".join(parts)


def _steps_table(steps: Sequence[Step]) -> list[str]:
    out = [
        "<h2>Control intervals</h2><table><tr><th>t (s)</th><th>share</th><th>next</th>"
        "<th>action</th><th>served/s</th><th>levels</th><th>reason</th></tr>"
    ]
    for s in steps:
        levels = ", ".join(f"{k} {v or 'none'}" for k, v in s.levels.items())
        out.append(
            f"<tr><td>{s.t_s:.1f}</td><td>{s.share:.1%}</td><td>{s.next_share:.1%}</td>"
            f"<td>{_e(s.action)}</td><td>{_n(s.served_per_s)}</td><td>{_e(levels)}</td>"
            f"<td>{_e(s.reason)}</td></tr>"
        )
    out.append("</table>")
    return out


def write_reports(result: KrakenResult, *, json_path: Path | None, html_path: Path | None) -> None:
    if json_path is not None:
        write_json(json_path, result_json(result))
    if html_path is not None:
        html_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = html_path.with_name(f".{html_path.name}.tmp")
        tmp.write_text(render_html(result))
        tmp.replace(html_path)
