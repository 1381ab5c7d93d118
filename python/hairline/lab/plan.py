"""How many trials (and hosts, requests) an experiment needs: ``hairline plan``.

Two sources of the per-trial spread: variance components (Perflab Table 1, or the user's
own) through each design's standard error, or A/A observations through the spread of their
per-trial effects (ServiceLab figure 6). Both feed :func:`hairline.stats.planning.trials_needed`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hairline.config import Threshold
from hairline.errors import ConfigError, DataError
from hairline.stats.designs import VarianceComponents
from hairline.stats.planning import (
    CostModel,
    DesignPlan,
    HalfWidthCurve,
    TrialsPlan,
    half_width_curve,
    plan_designs,
    trial_sd_from_aa,
    trials_by_design,
    trials_needed,
)
from hairline.store.observations import Observations

__all__ = [
    "MetricPlan",
    "PlanReport",
    "parse_components",
    "plan_from_aa",
    "plan_from_components",
]

_COMPONENT_NAMES = {
    "request": "sigma_request",
    "host": "sigma_host",
    "request_batch": "sigma_request_batch",
    "host_batch": "sigma_host_batch",
    "noise": "sigma_noise",
    "mu": "mu",
}


@dataclass(frozen=True)
class MetricPlan:
    """The plan for one metric measured in A/A runs."""

    metric: str
    aa_trials: int
    trials: TrialsPlan
    curve: HalfWidthCurve


@dataclass(frozen=True)
class PlanReport:
    source: str
    by_design: tuple[TrialsPlan, ...] = ()
    budget: tuple[DesignPlan, ...] = ()
    metrics: tuple[MetricPlan, ...] = ()
    threshold: str = ""


def parse_components(text: str) -> VarianceComponents:
    """``request=1.02,host=0.12,request_batch=0.1,host_batch=0.08,noise=0.13[,mu=0.06]``."""
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, raw = part.partition("=")
        field = _COMPONENT_NAMES.get(name.strip())
        if not sep or field is None:
            raise ConfigError(
                f"--components: {part!r} is not NAME=VALUE with a known name",
                hint=f"names are {', '.join(_COMPONENT_NAMES)}, e.g. request=1.02,noise=0.13",
            )
        try:
            values[field] = float(raw)
        except ValueError:
            raise ConfigError(f"--components: {name}={raw!r} is not a number") from None
    missing = [n for n, f in _COMPONENT_NAMES.items() if f not in values and n != "mu"]
    if missing:
        raise ConfigError(
            f"--components: missing {', '.join(missing)}",
            hint="give every standard deviation (0 for a source you believe absent)",
        )
    try:
        return VarianceComponents(**values)
    except ValueError as err:
        raise ConfigError(f"--components: {err}") from None


def plan_from_components(
    components: VarianceComponents,
    *,
    threshold: Threshold,
    alpha: float,
    power: float,
    hosts: int,
    requests: int,
    repetitions: int,
    budget_s: float | None = None,
    costs: CostModel | None = None,
) -> PlanReport:
    """Trials needed by each design at the given sizes, and the best sizes under a budget."""
    if threshold.relative and components.mu == 0:
        raise ConfigError(
            f"a relative threshold ({threshold}) needs the mean of A in --components (mu=...)",
            hint="give mu, or an absolute threshold in the components' units",
        )
    try:
        by_design = trials_by_design(
            components,
            hosts=hosts,
            requests=requests,
            repetitions=repetitions,
            threshold=threshold.value,
            alpha=alpha,
            power=power,
            relative=threshold.relative,
        )
        budget = (
            plan_designs(components, budget_s=budget_s, costs=costs)
            if budget_s is not None and costs is not None
            else ()
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return PlanReport(
        source="variance components",
        by_design=by_design,
        budget=budget,
        threshold=str(threshold),
    )


def plan_from_aa(
    observations: Observations, *, threshold: Threshold, alpha: float, power: float
) -> PlanReport:
    """Per metric of an A/A file: the per-trial spread, the trials needed, the curve."""
    plans = []
    for metric, _, sample in observations.samples():
        if sample.trial is None:
            raise DataError(
                f"{observations.source}: planning from A/A data needs the 'trial' column",
                hint="each A/A trial's effect is one draw of the per-trial spread",
            )
        try:
            sd = trial_sd_from_aa(sample, relative=threshold.relative)
            trials = trials_needed(sd, threshold=threshold.value, alpha=alpha, power=power)
        except ValueError as err:
            raise DataError(f"{observations.source}: metric {metric!r}: {err}") from None
        if not math.isfinite(sd):
            continue
        plans.append(
            MetricPlan(
                metric=metric,
                aa_trials=len(set(sample.trial.tolist())),
                trials=trials,
                curve=half_width_curve(sd, max_trials=max(32, trials.trials), alpha=alpha),
            )
        )
    return PlanReport(source=observations.source, metrics=tuple(plans), threshold=str(threshold))
