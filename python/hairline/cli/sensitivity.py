"""``hairline sensitivity FILE``: how small a change this experiment file can see.

Runs the file as an A/A experiment of ``--trials`` fixed trials (the baseline on every arm,
kept as the service's A/A history like any ``hairline aa``), or reads a finished one
(``--from-experiment``), and prints, per metric, the per-trial noise and the minimum
detectable effect at 80% power against trials and minutes, and with ``--host-pairs`` the
minutes on host pairs side by side (lab/sensitivity.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.markup import escape as esc
from rich.table import Table

from hairline.cli._base import EXIT_OK, console, main
from hairline.cli._options import chosen_backend, parse_host_pairs, store_options
from hairline.cli._outputs import OutputFile, write_json_output
from hairline.cli.run import execute
from hairline.errors import ConfigError
from hairline.lab.files import load_experiment_file
from hairline.lab.sensitivity import (
    SensitivityJson,
    SensitivityReport,
    aa_trials_of,
    sensitivity_from_aa,
)
from hairline.store.db import open_store

__all__ = ["sensitivity"]


def _table(report: SensitivityReport) -> Table:
    grid = [n for n, _ in report.metrics[0].mde_by_trials] if report.metrics else []
    table = Table(
        title=f"Smallest change found with {report.power:.0%} power at alpha {report.alpha:g} "
        f"({report.source}; a trial took {report.trial_s:.0f} s)"
    )
    table.add_column("metric")
    table.add_column("noise per trial", justify="right")
    for n in grid:
        table.add_column(f"{n} trials\n{report.minutes(n):.1f} min", justify="right")
    for m in report.metrics:
        table.add_row(
            esc(m.metric),
            f"{m.sd_per_trial * 100:.3g}%",
            *(f"{v * 100:.3g}%" if v != float("inf") else "n/a" for _, v in m.mde_by_trials),
        )
    return table


def _pairs_table(report: SensitivityReport) -> Table:
    """Minutes for each number of trials on each number of host pairs side by side."""
    grid = [n for n, _ in report.metrics[0].mde_by_trials] if report.metrics else []
    table = Table(
        title="Minutes for those trials on host pairs side by side (the ray backend's "
        "[design] host_pairs; one trial per pair at a time: ceil(trials / pairs) trial times)"
    )
    table.add_column("host pairs")
    for n in grid:
        table.add_column(f"{n} trials", justify="right")
    for pairs in report.host_pairs:
        table.add_row(str(pairs), *(f"{report.minutes(n, pairs):.1f}" for n in grid))
    return table


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@store_options
@click.option("--trials", type=click.IntRange(3, 100), default=8, show_default=True,
              help="A/A trials to measure the noise with (3 at least: the spread of fewer "
              "says little).")  # fmt: skip
@click.option("--from-experiment", "from_experiment", type=int, metavar="ID",
              help="Measure on this finished A/A experiment instead of running one.")  # fmt: skip
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    help="A metric to report (repeatable; default: the file's [design] decide_on).",
)
@click.option("--power", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.8,
              show_default=True)  # fmt: skip
@click.option("--cpus-per-host", type=click.IntRange(1), help="CPUs per local host.")
@click.option("--host-pairs", "host_pairs_text", metavar="1,2,4",
              help="Also give the minutes on these numbers of host pairs side by side "
              "(default: 1, and the file's [design] host_pairs when more).")  # fmt: skip
@click.option("--json", "json_path", type=OutputFile(),
              help="Write the table as JSON ('-' for stdout).")  # fmt: skip
def sensitivity(
    file: Path,
    db_url: str | None,
    home: Path,
    trials: int,
    from_experiment: int | None,
    metrics: tuple[str, ...],
    power: float,
    cpus_per_host: int | None,
    host_pairs_text: str | None,
    json_path: Path | None,
) -> None:
    """How small a change FILE's experiment can see: its service's noise per trial,
    measured with A/A trials, and the minimum detectable effect against trials and minutes.

    The MDE of n trials is the smallest true change a two-sided t test at the file's alpha
    flags with --power (the noncentral t); a trial lasts as long as the A/A's did. Exit
    status: 0 measured, 2 an error (or the A/A failed).
    """
    out = console(json_path)
    config = load_experiment_file(file)
    wanted = list(metrics) or list(config.design.decide_on)
    store = open_store(db_url, home=home)
    try:
        experiment_id = from_experiment
        if experiment_id is None:
            fixed = config.model_copy(
                update={"design": config.design.model_copy(update={"trials": trials})}
            )
            experiment_id = execute(
                fixed, kind="aa", store=store, no_process=False, no_wait=False, lease_s=30.0,
                cpus_per_host=cpus_per_host, out=out, backend=chosen_backend("local", None),
            )  # fmt: skip
        observations, trial_s = aa_trials_of(store, experiment_id)
    finally:
        store.close()
    unknown = sorted(set(wanted) - set(observations.metrics))
    if unknown:
        raise ConfigError(
            f"{', '.join(unknown)}: not measured by A/A experiment {experiment_id}",
            hint=f"--metric takes one of {', '.join(observations.metrics)}",
        )
    pairs = parse_host_pairs(host_pairs_text) or tuple(sorted({1, config.design.most_host_pairs}))
    report = sensitivity_from_aa(
        observations, trial_s=trial_s, alpha=config.analysis.alpha, power=power,
        metrics=wanted, host_pairs=pairs,
    )  # fmt: skip
    out.print(_table(report))
    if report.host_pairs != (1,):
        out.print(_pairs_table(report))
    for split in report.by_host:
        (first, second) = split.hosts
        out.print(
            f"{esc(split.metric)} per batch: host {first.host} reads {first.offset_rel:+.2%} "
            f"against the mean and varies {first.sd_rel:.2%}, host {second.host} "
            f"{second.offset_rel:+.2%} and {second.sd_rel:.2%}; the two move together at r = "
            f"{split.common_corr:.2f} ({split.batches} batches). Swapping the arms cancels the "
            "offsets and what both share; each host's own variation is the noise."
        )
    for metric, why in report.skipped:
        out.print(f"[yellow]{esc(metric)}[/]: no sensitivity: {esc(why)}")
    out.print(
        "[dim]Each trial's A/A effect is one draw of the noise an A/B on this file carries; "
        "more trials shrink the detectable change as 1/sqrt(trials). On host pairs side by "
        "side (the ray backend, [design] host_pairs) the same trials take ceil(trials / "
        "pairs) trial times, with the same MDE: each trial's arms share one pair.[/]"
    )
    if json_path is not None:
        payload: SensitivityJson = {"experiment_id": experiment_id, **report.to_json()}
        write_json_output(out, json_path, payload)
    sys.exit(EXIT_OK)
