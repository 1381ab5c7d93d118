"""Terminal tables (rich)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from hairline.lab.analysis import Analysis
from hairline.lab.plan import PlanReport
from hairline.report.context import (
    FUNCTION_HEADER,
    SUGGESTED_MARK,
    ExperimentReport,
    aa_text,
    arm_capacities,
    capacity_text,
    certificates,
    comparison_text,
    deciding_text,
    effect_text,
    function_lines,
    function_summary,
    headline,
    mde_text,
    overlap_notes,
    suggested_in,
    suggested_summary,
    threshold_text,
)
from hairline.stats.certificate import AaRecord

__all__ = ["print_analysis", "print_experiment", "print_plan"]

_STYLE = {
    "regression": "bold red",
    "improvement": "green",
    "no change": "dim",
    "inconclusive": "yellow",
}


def _fmt(x: float, relative: bool) -> str:
    return f"{x * 100:.3g}%" if relative else f"{x:.4g}"


def print_plan(report: PlanReport, console: Console) -> None:
    relative = report.threshold.endswith("%")
    if report.by_design:
        first = report.by_design[0]
        table = Table(
            title=f"Trials to detect {report.threshold} at alpha {first.alpha:g}, "
            f"power {first.power:g} ({report.source})"
        )
        for column in ("design", "SE per trial", "trials", "power", "half-width"):
            table.add_column(column, justify="left" if column == "design" else "right")
        for p in report.by_design:
            table.add_row(
                p.design or "",
                _fmt(p.sd_per_trial, relative),
                str(p.trials),
                f"{p.achieved_power:.3f}",
                _fmt(p.half_width, relative),
            )
        console.print(table)
    if report.budget:
        table = Table(title="Best sizes within the budget (Perflab 3.1.2), best first")
        for column in ("design", "hosts", "requests", "repetitions", "SE", "cost (host-s)"):
            table.add_column(column, justify="left" if column == "design" else "right")
        for b in report.budget:
            table.add_row(
                b.design,
                str(b.hosts),
                str(b.requests),
                str(b.repetitions),
                f"{b.standard_error:.4g}",
                f"{b.cost_s:,.0f}",
            )
        console.print(table)
    if report.metrics:
        table = Table(title=f"Trials to detect {report.threshold} ({report.source})")
        for column in ("metric", "A/A trials", "SD per trial", "trials", "half-width"):
            table.add_column(column, justify="left" if column == "metric" else "right")
        for m in report.metrics:
            table.add_row(
                m.metric,
                str(m.aa_trials),
                _fmt(m.trials.sd_per_trial, relative),
                str(m.trials.trials),
                _fmt(m.trials.half_width, relative),
            )
        console.print(table)
    _print_on_pairs(report, console)


def _print_on_pairs(report: PlanReport, console: Console) -> None:
    """``--host-pairs``: each plan's trials as rounds (and minutes) on that many pairs."""
    rows = [(d.design or "", d.trials, d.on_pairs) for d in report.by_design] + [
        (m.metric, m.trials.trials, m.on_pairs) for m in report.metrics
    ]
    rows = [row for row in rows if row[2]]
    if not rows:
        return
    table = Table(
        title="The same trials on host pairs side by side (one trial per pair at a time; "
        "the verdict's trials, so its MDE, unchanged)"
    )
    table.add_column("design or metric")
    table.add_column("trials", justify="right")
    for p in rows[0][2]:
        table.add_column(f"{p.host_pairs} pair{'s' if p.host_pairs > 1 else ''}", justify="right")
    for name, trials, on_pairs in rows:
        table.add_row(
            name,
            str(trials),
            *(
                f"{p.rounds} round{'s' if p.rounds > 1 else ''}"
                + (f", {p.minutes:.1f} min" if p.minutes is not None else "")
                for p in on_pairs
            ),
        )
    console.print(table)


def print_analysis(
    analysis: Analysis, console: Console, aa: Mapping[str, AaRecord] | None = None
) -> None:
    """The verdict table, each verdict with its certificate: the metric's false positives
    on the service's A/A history ``aa`` and the change this experiment detects."""
    chained = analysis.chained
    certs = certificates(analysis, aa or {})
    against = "its baseline" if chained else analysis.baseline
    table = Table(
        title=f"{analysis.source}: each arm against {against} "
        f"(alpha {analysis.alpha:g}, correction {analysis.correction})"
    )
    columns = ["metric", "arm", *(["against"] if chained else [])]
    columns += ["effect", "CI", "p", "threshold", "model", "verdict", "A/A flagged", "detects"]
    for column in columns:
        right = column in ("effect", "p", "detects")
        table.add_column(column, justify="right" if right else "left")
    for r in analysis.results:
        v = r.verdict
        # As the verdict judged it: percent for a relative threshold, the metric's unit for
        # an absolute one.
        effect, interval = effect_text(r)
        table.add_row(
            escape(r.metric),
            escape(r.candidate),
            *([escape(r.baseline)] if chained else []),
            effect,
            escape(interval),
            f"{v.p_adjusted:.3g}",
            threshold_text(r),
            r.model,
            f"[{_STYLE.get(v.label, '')}]{v.label}[/]",
            escape(aa_text(cert := certs[(r.metric, r.candidate)])),
            mde_text(cert),
        )
    console.print(table)
    console.print(
        "A/A flagged: this metric's false positives on the service's A/A runs, and the "
        "count alpha explains; detects: the smallest change this experiment finds with 80% "
        "power.",
        style="dim",
    )
    if chained:
        console.print(escape(deciding_text(analysis)), style="bold")
    for r in analysis.results:
        notes = [*r.comparison.warnings]
        if r.warmup_rows_cut:
            notes.append(f"warm-up: {r.warmup_rows_cut} rows cut")
        if r.model_reason != "chosen by the user":
            notes.append(r.model_reason)
        arm = comparison_text(r) if chained else r.candidate
        for note in notes:
            console.print(escape(f"  {r.metric} ({arm}): {note}"), style="dim")


_HEADLINE_STYLE = {
    "regression": "bold red",
    "no regression": "bold green",
    "inconclusive": "bold yellow",
    "failed": "bold red",
    "cancelled": "yellow",
    "running": "bold blue",
}
# Phases in which trials are still to come, so a progress bar says something.
_ACTIVE = ("queued", "building", "allocating", "running", "analyzing")


def _when(report: ExperimentReport) -> str:
    parts = [f"created {report.created_at:%Y-%m-%d %H:%M:%S}"]
    if report.started_at is not None:
        parts.append(f"started {report.started_at:%H:%M:%S}")
    if report.finished_at is not None:
        parts.append(f"finished {report.finished_at:%H:%M:%S}")
        if report.started_at is not None:
            took_s = (report.finished_at - report.started_at).total_seconds()
            parts.append(f"took {took_s:.0f} s")
    return ", ".join(parts)


def _experiment_panel(report: ExperimentReport) -> Panel:
    head = headline(report)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column()
    kind = "A/A" if report.kind == "aa" else "A/B"
    grid.add_row("experiment", Text(f"{report.experiment_id} ({kind}) of {report.service}"))
    phase: RenderableType = Text(report.phase)
    if report.phase in _ACTIVE:
        bar = Table.grid(padding=(0, 1))
        bar.add_row(
            Text(report.phase),
            ProgressBar(total=max(report.trials, 1), completed=report.trials_done, width=30),
            Text(f"{report.trials_done}/{report.trials} trials"),
        )
        phase = bar
    grid.add_row("phase", phase)
    if report.failure:
        grid.add_row("failure", Text(report.failure.strip(), style="red"))
    grid.add_row("when", Text(_when(report)))
    grid.add_row(
        "design",
        Text(
            f"{report.design}, {report.trials_done} of {report.trials} trials, "
            f"{report.rate_per_s:g} requests/s for {report.duration_s:g} s, model {report.model}"
        ),
    )
    if report.mode != "efficiency":
        grid.add_row("mode", Text(report.mode))
    for capacity in arm_capacities(report):
        grid.add_row(f"capacity {capacity.arm}", Text(capacity_text(capacity)))
    for arm in report.arms:
        build = ""
        if arm.build_key is not None:
            cached = {True: ", cached", False: ", built", None: ""}[arm.build_cached]
            build = f" (build {arm.build_key[:12]}{cached})"
        setup = f"; {arm.setup}" if arm.setup else ""
        against = f"; against {arm.baseline}" if report.chained and arm.baseline else ""
        grid.add_row(f"arm {arm.name}", Text(arm.source + build + setup + against))
    for host in report.hosts:
        facts = ", ".join(f"{k} {v}" for k, v in host.facts.items())
        grid.add_row(f"host {host.host}", Text(host.where + (f"; {facts}" if facts else "")))
    for note in report.notes:
        grid.add_row("note", Text(note, style="yellow"))
    if report.html_path is not None:
        grid.add_row("HTML report", Text(str(report.html_path)))
    return Panel(
        Group(
            Text(head.text, style=_HEADLINE_STYLE[head.status]),
            *(Text(note, style="bold yellow") for note in overlap_notes(report.overlaps)),
            Text(""),
            grid,
        ),
        title=Text(f"hairline: {report.service} #{report.experiment_id}"),
        title_align="left",
        expand=False,
    )


def print_experiment(report: ExperimentReport, console: Console) -> None:
    """A header panel (service, phase or failure, arms, hosts), then the verdict table."""
    console.print(_experiment_panel(report))
    if report.analysis is not None:
        print_analysis(report.analysis, console, report.aa_records)
    print_functions(report, console)


def print_functions(report: ExperimentReport, console: Console) -> None:
    """The functions that changed, per candidate ([service.profile]), or why none."""
    if report.functions_note:
        console.print(escape(report.functions_note), style="yellow")
    for analysis in report.functions:
        console.print(escape("Functions: " + function_summary(analysis)))
        marked = suggested_in({c.function for c in analysis.changes}, report.suggested_functions)
        lines = list(function_lines(analysis, marked))
        if lines:
            table = Table(title=f"functions that changed ({analysis.candidate})")
            for column in FUNCTION_HEADER:
                right = column not in ("function", "cost", "verdict")
                table.add_column(column, justify="right" if right else "left")
            for line in lines:
                style = _STYLE.get(line.verdict, "")
                cells = [escape(c) for c in line.cells]
                if line.suggested:
                    cells[0] = f"{SUGGESTED_MARK} {cells[0]}"
                table.add_row(*cells[:-1], f"[{style}]{cells[-1]}[/]" if style else cells[-1])
            console.print(table)
        if sentence := suggested_summary(analysis, report.suggested_functions):
            console.print(escape(sentence))
