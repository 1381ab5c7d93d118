"""``hairline demo``: the bundled sample service through the whole lab, a check of
hairline itself whose exit status says whether its verdict was true to what it injected."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from hairline.cli._base import EXIT_ERROR, EXIT_OK, EXIT_REGRESSION, console, main
from hairline.cli._options import otlp_target, report_options, store_options
from hairline.cli.experiments import emit_reports
from hairline.cli.run import execute
from hairline.collect.summary import CPU_PER_REQUEST
from hairline.lab.demo import demo_config
from hairline.store.db import open_store

__all__ = ["demo_outcome"]


@main.command()
@click.option("--regress-cpu", type=click.FloatRange(0, 1), default=0.05, show_default=True)
@click.option("--trials", type=click.IntRange(1), default=7, show_default=True)
@click.option("--duration-s", type=click.FloatRange(1), default=4.0, show_default=True)
@click.option("--rate", "rate_per_s", type=click.FloatRange(1), default=None,
              help="Replay rate; default: calibrated, the most precise per minute.")  # fmt: skip
@store_options
@report_options
def demo(
    regress_cpu: float,
    trials: int,
    duration_s: float,
    rate_per_s: float | None,
    db_url: str | None,
    home: Path,
    json_path: Path | None,
    markdown_path: Path | None,
    html_path: Path | None,
    junit_path: Path | None,
    otlp_url: str | None,
    otlp_timeout_s: float,
) -> None:
    """A/B of the bundled sample service with a CPU regression injected into B.

    Runs examples/sample-service/experiment.toml through the lab (queue, hosts, trials,
    analysis, reports). Exit status: 0 when the verdict is true to what was injected (the
    regression caught; with --regress-cpu 0, nothing flagged), 1 when it is not, 2 on an
    error.
    """
    out = console(json_path, markdown_path, junit_path)
    config = demo_config(
        regress_cpu=regress_cpu, trials=trials, duration_s=duration_s, rate_per_s=rate_per_s
    )
    out.print(
        f"[bold]hairline demo[/]: sample service A against B with {regress_cpu:.0%} more CPU "
        f"per request; {trials} trials x 2 batches (fully balanced), {duration_s:g} s at "
        + (f"{rate_per_s:g} requests/s" if rate_per_s else "a rate calibrated for precision")
        + " each, arms on their own CPUs, replayed in lockstep."
    )
    store = open_store(db_url, home=home)
    try:
        # The demo waits for this machine's CPU sets as long as it takes, as it always has.
        experiment_id = execute(
            config, kind="ab", store=store, no_process=False, no_wait=False, lease_s=30.0,
            cpus_per_host=None, out=out, wait_s=0.0,
        )  # fmt: skip
        report = emit_reports(
            store, experiment_id, out,
            json_path=json_path, markdown_path=markdown_path, html_path=html_path,
            junit_path=junit_path, otlp=otlp_target(otlp_url, otlp_timeout_s),
        )  # fmt: skip
    finally:
        store.close()
    if report.phase != "done":
        sys.exit(EXIT_ERROR)
    flagged = report.analysis is not None and any(
        r.metric == CPU_PER_REQUEST.name and r.verdict.label == "regression"
        for r in report.analysis.results
    )
    ok, message = demo_outcome(regress_cpu, flagged)
    out.print(("[bold green]" if ok else "[bold red]") + message)
    sys.exit(EXIT_OK if ok else EXIT_REGRESSION)


def demo_outcome(regress_cpu: float, flagged: bool) -> tuple[bool, str]:
    """The demo's one contract: it passes (exit 0) when hairline told the truth about what
    was injected: the regression flagged when there was one, nothing flagged when
    ``--regress-cpu 0``. Exit 1 otherwise (a miss or a false alarm), 2 on an error."""
    if regress_cpu > 0:
        if flagged:
            return True, f"caught[/]: the {regress_cpu:.0%} CPU regression in B was flagged."
        return False, f"missed[/]: the {regress_cpu:.0%} CPU regression was not flagged."
    if flagged:
        return False, "false alarm[/]: nothing was injected, yet a CPU regression was flagged."
    return True, "correct[/]: nothing was injected and nothing was flagged."
