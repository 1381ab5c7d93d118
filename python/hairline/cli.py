"""The ``hairline`` command: one group, every subcommand thin.

Each subcommand turns its options into typed values and calls into the library; user errors
(:class:`hairline.errors.HairlineError`) are printed without a traceback and exit 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from hairline import __version__
from hairline.config import parse_threshold
from hairline.errors import ConfigError, HairlineError
from hairline.lab.plan import parse_components, plan_from_aa, plan_from_components
from hairline.report.jsonout import write_json
from hairline.report.terminal import print_plan
from hairline.stats.designs import VarianceComponents
from hairline.stats.planning import CostModel
from hairline.store.observations import read_observations

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HairlineError as err:
            click.secho(f"error: {err.message}", fg="red", err=True)
            if err.hint:
                click.echo(f"  hint: {err.hint}", err=True)
            sys.exit(EXIT_ERROR)


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="hairline")
def main() -> None:
    """Catch tiny performance regressions in services before they reach production."""


def _console() -> Console:
    return Console(stderr=False, highlight=False)


@main.command()
@click.option(
    "--endpoint",
    type=click.IntRange(1, 5),
    help="Use Perflab Table 1's variance components of this endpoint (standardised units).",
)
@click.option(
    "--components",
    metavar="NAME=SD,...",
    help="Your variance components: request, host, request_batch, host_batch, noise[, mu].",
)
@click.option(
    "--aa",
    "aa_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="An A/A observations file (.parquet/.csv with a trial column).",
)
@click.option(
    "--threshold",
    "threshold_text",
    required=True,
    help="Smallest effect to detect: 1% (relative) or 0.05 (absolute, the data's units).",
)
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05)
@click.option("--power", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.8)
@click.option("--hosts", type=click.IntRange(2), default=16, show_default=True)
@click.option("--requests", type=click.IntRange(1), default=256, show_default=True)
@click.option("--repetitions", type=click.IntRange(1), default=1, show_default=True)
@click.option("--budget-s", type=click.FloatRange(0, min_open=True), help="Host-seconds to spend.")
@click.option("--setup-s", type=float, default=60.0, show_default=True, help="Per host and batch.")
@click.option("--request-s", type=float, default=0.05, show_default=True)
@click.option("--repetition-s", type=float, default=0.05, show_default=True)
@click.option("--max-hosts", type=click.IntRange(2), default=64, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
def plan(
    endpoint: int | None,
    components: str | None,
    aa_path: Path | None,
    threshold_text: str,
    alpha: float,
    power: float,
    hosts: int,
    requests: int,
    repetitions: int,
    budget_s: float | None,
    setup_s: float,
    request_s: float,
    repetition_s: float,
    max_hosts: int,
    json_path: Path | None,
) -> None:
    """Trials (and hosts, requests) needed to detect a threshold, for each design."""
    sources = [s for s in (endpoint, components, aa_path) if s is not None]
    if len(sources) != 1:
        raise ConfigError(
            "plan needs exactly one source of variance",
            hint="give --endpoint N (Perflab Table 1), --components ..., or --aa FILE",
        )
    threshold = parse_threshold(threshold_text, source="--threshold")
    if aa_path is not None:
        report = plan_from_aa(
            read_observations(aa_path), threshold=threshold, alpha=alpha, power=power
        )
    else:
        vc = (
            VarianceComponents.table1(endpoint)
            if endpoint is not None
            else parse_components(components or "")
        )
        report = plan_from_components(
            vc,
            threshold=threshold,
            alpha=alpha,
            power=power,
            hosts=hosts,
            requests=requests,
            repetitions=repetitions,
            budget_s=budget_s,
            costs=CostModel(
                setup_s=setup_s,
                request_s=request_s,
                repetition_s=repetition_s,
                max_hosts=max_hosts,
            ),
        )
    print_plan(report, _console())
    if json_path is not None:
        write_json(json_path, report)
        click.echo(f"wrote {json_path}")
