"""The lab's commands: ``hairline demo``."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from hairline.cli._base import EXIT_OK, EXIT_REGRESSION, console, main
from hairline.lab.demo import run_demo
from hairline.lab.schedule import Batch
from hairline.report.jsonout import write_json
from hairline.report.terminal import analysis_json, print_analysis


@main.command()
@click.option("--regress-cpu", type=click.FloatRange(0, 1), default=0.05, show_default=True)
@click.option("--trials", type=click.IntRange(1), default=7, show_default=True)
@click.option("--duration-s", type=click.FloatRange(1), default=6.0, show_default=True)
@click.option("--rate", "rate_per_s", type=click.FloatRange(1), default=400.0, show_default=True)
@click.option(
    "--dir",
    "root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".hairline"),
    show_default=True,
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
def demo(
    regress_cpu: float,
    trials: int,
    duration_s: float,
    rate_per_s: float,
    root: Path,
    json_path: Path | None,
) -> None:
    """A/B of the bundled sample service with a CPU regression injected into B.

    Exits 0 when the injected regression is caught, 1 when it is missed.
    """
    out = console()
    out.print(
        f"[bold]hairline demo[/]: sample service A against B with {regress_cpu:.0%} more CPU "
        f"per request; {trials} trials x 2 batches (fully balanced), {duration_s:g} s at "
        f"{rate_per_s:g} requests/s each, arms on their own CPUs, replayed in lockstep."
    )
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(), console=out, transient=False,
    ) as bar:  # fmt: skip
        task = bar.add_task("batches", total=trials * 2)
        last: list[tuple[int, int]] = []

        def progress(batch: Batch, what: str) -> None:
            key = (batch.trial, batch.batch)
            if last and last[-1] != key:
                bar.advance(task)
            if not last or last[-1] != key:
                last.append(key)
            bar.update(task, description=f"trial {batch.trial + 1} batch {batch.batch + 1}: {what}")

        result = run_demo(
            root,
            regress_cpu=regress_cpu,
            progress=progress,
            trials=trials,
            duration_s=duration_s,
            rate_per_s=rate_per_s,
        )
        bar.update(task, completed=trials * 2, description="done")
    print_analysis(result.analysis, out)
    out.print(f"observations: {result.observations}")
    if json_path is not None:
        write_json(json_path, analysis_json(result.analysis))
        out.print(f"wrote {json_path}")
    if result.caught:
        out.print(f"[bold green]caught[/]: the {regress_cpu:.0%} CPU regression in B was flagged.")
        sys.exit(EXIT_OK)
    out.print(f"[bold red]missed[/]: the {regress_cpu:.0%} CPU regression was not flagged.")
    sys.exit(EXIT_REGRESSION)
