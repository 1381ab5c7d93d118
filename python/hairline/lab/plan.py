"""How many trials (and hosts, requests) an experiment needs: ``hairline plan``; with
``--host-pairs``, how many rounds (and minutes) those trials take on host pairs side by side.

Two sources of the per-trial spread: variance components (Perflab Table 1, or the user's
own) through each design's standard error, or A/A observations through the spread of their
per-trial effects (ServiceLab figure 6). Both feed
:func:`hairline.stats.verdictplan.trials_for_verdict`: the fewest trials at which a seeded
simulation of the actual verdict (the fallback model and the threshold rule) labels a true
regression of ``effect`` "regression" with the asked power. The effect defaults to twice
the threshold, because a regression of exactly the threshold is flagged at most about half
the time, whatever the trials (the verdict needs the estimate to reach the threshold).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from hairline.config import Threshold
from hairline.errors import ConfigError, DataError
from hairline.kit.jsonout import documented
from hairline.stats.designs import DESIGNS, Design, VarianceComponents
from hairline.stats.pairtime import PairsTime, trials_on_pairs
from hairline.stats.planning import (
    CostModel,
    DesignPlan,
    HalfWidthCurve,
    half_width_curve,
    plan_designs,
    trial_sd_from_aa,
    trial_sd_from_components,
)
from hairline.stats.verdictplan import VerdictPlan, trials_for_verdict
from hairline.store.observations import Observations

__all__ = [
    "DesignTrials",
    "MetricPlan",
    "PlanReport",
    "default_effect",
    "on_host_pairs",
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
class DesignTrials(VerdictPlan):
    """The plan of one design: its per-trial spread and the trials its verdict needs."""

    design: Design | None = None
    on_pairs: tuple[PairsTime, ...] = ()
    """With ``--host-pairs``: those trials' rounds (and minutes) on each number of pairs."""


@dataclass(frozen=True)
class MetricPlan:
    """The plan for one metric measured in A/A runs."""

    metric: str
    aa_trials: int
    trials: VerdictPlan
    curve: HalfWidthCurve
    on_pairs: tuple[PairsTime, ...] = ()
    """With ``--host-pairs``: those trials' rounds (and minutes) on each number of pairs."""


@documented
@dataclass(frozen=True)
class PlanReport:
    """Trials (and hosts, requests) at which the verdict catches a regression, per design
    (``hairline plan --json``; docs/stats.md)."""

    source: str
    """Where the variance came from: Perflab's table, the components given, or the A/A
    observations."""
    by_design: tuple[DesignTrials, ...] = ()
    """Per design, its per-trial spread and the trials its verdict needs."""
    budget: tuple[DesignPlan, ...] = ()
    """With ``--budget-s``: per design, the sizes that minimise its standard error."""
    metrics: tuple[MetricPlan, ...] = ()
    """With ``--aa``: per metric measured in the A/A runs."""
    threshold: str = ""
    effect: str = ""
    """The regression planned for (default: twice the threshold)."""


def on_host_pairs(
    report: PlanReport, host_pairs: Sequence[int], trial_s: float | None = None
) -> PlanReport:
    """``report`` with each design's and metric's trials spread over ``host_pairs`` pairs
    side by side: ceil(trials / pairs) rounds, times ``trial_s`` when given (the verdict's
    trials, hence its MDE, stay the same; stats/pairtime.py)."""
    if not host_pairs:
        return report
    return dataclasses.replace(
        report,
        by_design=tuple(
            dataclasses.replace(d, on_pairs=trials_on_pairs(d.trials, host_pairs, trial_s))
            for d in report.by_design
        ),
        metrics=tuple(
            dataclasses.replace(m, on_pairs=trials_on_pairs(m.trials.trials, host_pairs, trial_s))
            for m in report.metrics
        ),
    )


def default_effect(threshold: Threshold) -> Threshold:
    """The regression a plan is for unless told: twice the threshold (module text)."""
    return Threshold(2 * threshold.value, relative=threshold.relative)


def _check_effect(threshold: Threshold, effect: Threshold) -> None:
    if effect.relative != threshold.relative:
        raise ConfigError(
            f"the effect to plan for ({effect}) and the threshold ({threshold}) must both be "
            f"relative or both absolute",
            hint="write both as percentages (1%), or both in the metric's unit",
        )
    if effect.value <= threshold.value:
        raise ConfigError(
            f"a regression of {effect} is not larger than the threshold {threshold}: the "
            f"verdict flags one at the threshold at most about half the time, whatever the "
            f"trials",
            hint=f"plan for a larger effect, such as --effect {default_effect(threshold)}",
        )


def _verdict_plan(sd: float, threshold: Threshold, effect: Threshold, alpha: float,
                  power: float) -> VerdictPlan:  # fmt: skip
    try:
        return trials_for_verdict(
            sd, threshold=threshold.value, effect=effect.value, alpha=alpha, power=power
        )
    except ValueError as err:
        raise ConfigError(
            str(err),
            hint="raise the threshold or --effect, or reduce the per-trial spread (more "
            "requests per trial, a more balanced design)",
        ) from None


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
    effect: Threshold | None = None,
) -> PlanReport:
    """Trials needed by each design at the given sizes (best first), and the best sizes
    under a budget."""
    effect = effect or default_effect(threshold)
    _check_effect(threshold, effect)
    if threshold.relative and components.mu == 0:
        raise ConfigError(
            f"a relative threshold ({threshold}) needs the mean of A in --components (mu=...)",
            hint="give mu, or an absolute threshold in the components' units",
        )
    plans = []
    for design in DESIGNS:
        try:
            sd = trial_sd_from_components(
                components,
                design=design,
                hosts=hosts,
                requests=requests,
                repetitions=repetitions,
                relative=threshold.relative,
            )
        except ValueError as err:
            raise ConfigError(str(err)) from None
        found = _verdict_plan(sd, threshold, effect, alpha, power)
        plans.append(DesignTrials(**vars(found), design=design))
    try:
        budget = (
            plan_designs(components, budget_s=budget_s, costs=costs)
            if budget_s is not None and costs is not None
            else ()
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return PlanReport(
        source="variance components",
        by_design=tuple(sorted(plans, key=lambda p: (p.trials, p.sd_per_trial))),
        budget=budget,
        threshold=str(threshold),
        effect=str(effect),
    )


def plan_from_aa(
    observations: Observations,
    *,
    threshold: Threshold,
    alpha: float,
    power: float,
    effect: Threshold | None = None,
) -> PlanReport:
    """Per metric of an A/A file: the per-trial spread, the trials needed, the curve."""
    effect = effect or default_effect(threshold)
    _check_effect(threshold, effect)
    plans = []
    for metric, _, sample in observations.samples():
        if sample.trial is None:
            raise DataError(
                f"{observations.source}: planning from A/A data needs the 'trial' column",
                hint="each A/A trial's effect is one draw of the per-trial spread",
            )
        try:
            sd = trial_sd_from_aa(sample, relative=threshold.relative)
        except ValueError as err:
            raise DataError(f"{observations.source}: metric {metric!r}: {err}") from None
        if not math.isfinite(sd):
            continue
        if sd == 0.0:
            raise DataError(
                f"{observations.source}: metric {metric!r}: the A/A trials' effects do not "
                f"vary at all, so there is no spread to plan with",
                hint="check that the A/A runs measured the metric (a constant has no noise)",
            )
        trials = _verdict_plan(sd, threshold, effect, alpha, power)
        plans.append(
            MetricPlan(
                metric=metric,
                aa_trials=len(set(sample.trial.tolist())),
                trials=trials,
                curve=half_width_curve(sd, max_trials=max(32, trials.trials), alpha=alpha),
            )
        )
    return PlanReport(
        source=observations.source,
        metrics=tuple(plans),
        threshold=str(threshold),
        effect=str(effect),
    )
