"""``hairline plan`` and ``hairline analyze``: statistics on files, no lab needed."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from hairline.cli._base import EXIT_OK, EXIT_REGRESSION, console, main
from hairline.cli._options import parse_host_pairs, write_json_output
from hairline.cli._outputs import OutputFile
from hairline.config import MetricPolicy, parse_directions, parse_threshold, parse_thresholds
from hairline.errors import ConfigError
from hairline.lab.analysis import AnalysisOptions
from hairline.lab.analysis import analyze as run_analysis
from hairline.lab.plan import (
    default_effect,
    on_host_pairs,
    parse_components,
    plan_from_aa,
    plan_from_components,
)
from hairline.report.context import analysis_json
from hairline.report.terminal import print_analysis, print_plan
from hairline.stats import list_models
from hairline.stats.designs import VarianceComponents
from hairline.stats.planning import CostModel
from hairline.store.observations import read_observations


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
@click.option(
    "--effect",
    "effect_text",
    help="The true regression to catch (default: twice the threshold): the verdict flags "
    "one of exactly the threshold at most about half the time.",
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
@click.option("--host-pairs", "host_pairs_text", metavar="1,2,4",
              help="Also say how long the trials take on these numbers of host pairs side "
              "by side ([design] host_pairs, the ray backend): ceil(trials / pairs) "
              "rounds.")  # fmt: skip
@click.option("--trial-s", type=click.FloatRange(0, min_open=True),
              help="One trial's wall time, for --host-pairs' minutes.")  # fmt: skip
@click.option("--json", "json_path", type=OutputFile(),
              help="Write the result as JSON ('-' for stdout).")  # fmt: skip
def plan(
    endpoint: int | None,
    components: str | None,
    aa_path: Path | None,
    threshold_text: str,
    effect_text: str | None,
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
    host_pairs_text: str | None,
    trial_s: float | None,
    json_path: Path | None,
) -> None:
    """Trials (and hosts, requests) at which the verdict catches a regression, per design.

    The trials are the fewest at which a seeded simulation of the verdict (the fallback
    model and the threshold rule) labels a true regression of --effect "regression" with
    --power.
    """
    sources = [s for s in (endpoint, components, aa_path) if s is not None]
    if len(sources) != 1:
        raise ConfigError(
            "plan needs exactly one source of variance",
            hint="give --endpoint N (Perflab Table 1), --components ..., or --aa FILE",
        )
    threshold = parse_threshold(threshold_text, source="--threshold")
    effect = (
        parse_threshold(effect_text, source="--effect")
        if effect_text is not None
        else default_effect(threshold)
    )
    if aa_path is not None:
        report = plan_from_aa(
            read_observations(aa_path),
            threshold=threshold,
            alpha=alpha,
            power=power,
            effect=effect,
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
            effect=effect,
        )
    report = on_host_pairs(report, parse_host_pairs(host_pairs_text), trial_s)
    out = console(json_path)
    print_plan(report, out)
    out.print(
        f"trials: the fewest at which the fallback model and the verdict rule label a true "
        f"regression of {effect} (threshold {threshold}) a regression with power {power:g}, "
        f"in a seeded simulation; a regression of exactly the threshold is flagged at most "
        f"about half the time, whatever the trials"
    )
    if json_path is not None:
        write_json_output(out, json_path, report)


@main.command()
@click.argument("observations", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--model",
    default="adaptive",
    show_default=True,
    help="A model name (see --list-models) or adaptive: chosen per metric from --history.",
)
@click.option(
    "--bootstrap",
    type=click.Choice(["iid", "request", "host", "host-block"]),
    help="Shorthand for --model bootstrap-KIND (Perflab's clustered bootstrap).",
)
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05)
@click.option(
    "--threshold",
    "thresholds",
    multiple=True,
    metavar="METRIC=1%",
    help="Smallest change that matters, relative (1%) or absolute (0.2). Repeatable.",
)
@click.option("--default-threshold", default="1%", show_default=True, help="For metrics not named.")
@click.option(
    "--direction",
    "directions",
    multiple=True,
    metavar="METRIC=lower-is-worse",
    help="Which way is worse (default higher-is-worse). Repeatable.",
)
@click.option("--correction", type=click.Choice(["none", "holm", "bh"]), default="none")
@click.option(
    "--history",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A/A observations of the same service: for adaptive selection and the CI test.",
)
@click.option("--baseline", help="The baseline arm (default A, else the first arm).")
@click.option("--no-warmup-cut", is_flag=True, help="Keep warm-up rows of time series.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "json_path", type=OutputFile(),
              help="Write the result as JSON ('-' for stdout).")  # fmt: skip
def analyze(
    observations: Path,
    model: str,
    bootstrap: str | None,
    alpha: float,
    thresholds: tuple[str, ...],
    default_threshold: str,
    directions: tuple[str, ...],
    correction: str,
    history: Path | None,
    baseline: str | None,
    no_warmup_cut: bool,
    seed: int,
    json_path: Path | None,
) -> None:
    """Verdicts for every metric of an observations file (.parquet or .csv).

    Exit status: 0 no regression, 1 a regression, 2 an error.
    """
    if bootstrap is not None:
        if model != "adaptive":
            raise ConfigError("--model and --bootstrap both name a model", hint="give one")
        model = f"bootstrap-{bootstrap}"
    if model != "adaptive" and model not in list_models():
        raise ConfigError(
            f"--model {model!r} is not a model",
            hint=f"use adaptive or one of {', '.join(list_models())}",
        )
    parsed = parse_thresholds(thresholds)
    directions_by_metric = parse_directions(directions)
    default = parse_threshold(default_threshold, source="--default-threshold")
    policies = {
        metric: MetricPolicy(
            threshold=parsed.get(metric, default),
            direction=directions_by_metric.get(metric, "higher-is-worse"),
        )
        for metric in set(parsed) | set(directions_by_metric)
    }
    obs = read_observations(observations)
    unknown = sorted(set(policies) - set(obs.metrics))
    if unknown:
        raise ConfigError(
            f"--threshold/--direction name metrics not in {observations}: {', '.join(unknown)}",
            hint=f"its metrics are {', '.join(obs.metrics)}",
        )
    result = run_analysis(
        obs,
        AnalysisOptions(
            model=model,
            alpha=alpha,
            policies=policies,
            default_policy=MetricPolicy(threshold=default),
            correction=correction,  # type: ignore[arg-type]
            cut_warmup=not no_warmup_cut,
            seed=seed,
        ),
        history=read_observations(history) if history is not None else None,
        baseline=baseline,
    )
    out = console(json_path)
    print_analysis(result, out)
    if json_path is not None:
        write_json_output(out, json_path, analysis_json(result))
    sys.exit(EXIT_REGRESSION if result.regressions else EXIT_OK)
