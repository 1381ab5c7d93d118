"""Terminal tables (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from hairline.lab.plan import PlanReport

__all__ = ["print_plan"]


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
