"""Which host facts explain a metric's variance (ServiceLab section 4.1), and which CPU
models and kernels are noisy.

Every stored run (one arm on one host in one batch) is one row: the metric's mean over
the run's observations, and the facts of its host at the time (``runs.facts``, with the
host's columns for the facts the run did not record). The value is normalised by the
mean of its experiment (and arm, in an A/B: the change moves one arm, and no host fact
explains that), because the service and its load differ between experiments. Then:

- an OLS fit of the value on every fact that varies, as categories (statsmodels formula
  ``value ~ C(kernel) + C(cpu_model) + ...``) gives R² with all factors, the paper's upper
  bound, and a type II ANOVA of what each factor explains beyond the others;
- the same fit on every subset of one, two and three factors finds the smallest set that
  comes close to the bound: the facts to match hosts on;
- the coefficient of variation (sd / mean) of the runs of each CPU model and kernel, from
  A/A experiments by default, says which to avoid (:func:`cov_by_fact`, what allocation
  calls).

Normalising per experiment means an experiment whose hosts all share a fact says nothing
about that fact: its level is divided away. The analysis learns from experiments whose
hosts differ, such as A/A runs spread over host classes.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hairline.errors import DataError
from hairline.hosts.runs import DEFAULT_METRIC, FACTORS, UNKNOWN, RunValue, load_runs, normalised
from hairline.kit.jsonout import documented
from hairline.store.db import Store

__all__ = [
    "COV_FACTS",
    "DEFAULT_MIN_RUNS",
    "FactCoV",
    "FactorAnalysis",
    "FactorEffect",
    "Subset",
    "analyze_factors",
    "cov_by_fact",
    "cov_per_fact",
    "factor_analysis",
]

# The facts whose values' noise allocation asks about: which CPU models and kernels to avoid.
COV_FACTS = ("cpu_model", "kernel")
# Fewer runs than this is no basis for calling a CPU model or kernel noisy.
DEFAULT_MIN_RUNS = 10
# Subsets of up to this many factors are searched (the paper's answer had three).
MAX_SUBSET = 3


@documented
@dataclass(frozen=True)
class FactorEffect:
    """One factor in the fit with all factors (type II ANOVA), and alone."""

    factor: str
    levels: int
    sum_sq: float
    """What it explains beyond every other factor."""
    share: float
    """``sum_sq`` as a fraction of the total sum of squares."""
    f_value: float
    p_value: float
    r2_alone: float
    """R² of a fit on this factor alone."""


@documented
@dataclass(frozen=True)
class Subset:
    """The best subset of factors of one size."""

    factors: tuple[str, ...]
    r2: float
    r2_adj: float


@documented
@dataclass(frozen=True)
class FactCoV:
    """The spread of the normalised runs on hosts with one value of one fact."""

    fact: str
    value: str
    runs: int
    experiments: int
    mean: float
    sd: float
    cov: float
    """sd / mean."""


@documented
@dataclass(frozen=True)
class FactorAnalysis:
    """Which host facts explain a metric's variance over the stored runs
    (``hairline lab factors --json``; docs/hosts.md)."""

    metric: str
    runs: int
    experiments: int
    factors: tuple[str, ...]
    """The facts that vary, in the fit."""
    r2: float
    """R² with all factors: the upper bound."""
    r2_adj: float
    effects: tuple[FactorEffect, ...]
    """Best alone first."""
    best: tuple[Subset, ...]
    """The best subset of each size, 1 up to 3."""
    cov: tuple[FactCoV, ...]
    """Noisiest first within each fact."""
    cov_p50: dict[str, float]
    """Per fact, the median CoV of its values."""
    cov_kinds: tuple[str, ...]
    """The experiment kinds the CoV comes from."""
    notes: tuple[str, ...]


# -- pure analysis ------------------------------------------------------------------------


def _frame(runs: Sequence[RunValue], values: Sequence[float], factors: Sequence[str]) -> Any:
    import pandas as pd

    data: dict[str, Any] = {"value": np.asarray(values, dtype=np.float64)}
    for name in factors:
        data[name] = [run.facts.get(name, UNKNOWN) for run in runs]
    return pd.DataFrame(data)


def _formula(factors: Sequence[str]) -> str:
    return "value ~ " + " + ".join(f"C({f})" for f in factors)


# statsmodels and pandas are imported when a fit is made, not with this module: they take
# a second to import, and allocation (cov_by_fact) and the CLI's start need neither.


def _fit(frame: Any, factors: Sequence[str]) -> Any:
    import statsmodels.formula.api as smf

    return smf.ols(_formula(factors), data=frame).fit()


def _anova(model: Any) -> Any:
    import statsmodels.api as sm

    return sm.stats.anova_lm(model, typ=2)


def _float(x: Any) -> float:
    value = float(x)
    return value if math.isfinite(value) else math.nan


def analyze_factors(
    runs: Sequence[RunValue],
    *,
    metric: str = DEFAULT_METRIC,
    factors: Sequence[str] = FACTORS,
    cov_runs: Sequence[RunValue] | None = None,
    cov_kinds: tuple[str, ...] = ("aa",),
    min_runs: int = DEFAULT_MIN_RUNS,
) -> FactorAnalysis:
    """R² of the normalised metric on the host facts, for all factors and the best subsets
    of one to three; the type II ANOVA; and the CoV per CPU model and kernel of
    ``cov_runs`` (default: the A/A runs among ``runs``).

    A factor with a single level is left out with a note. Too few runs for the factors
    that vary is a :class:`DataError` that says how many are needed.
    """
    if not runs:
        raise DataError(
            f"no stored runs of metric {metric!r}",
            hint="run experiments first (`hairline run`, `hairline aa`); with --metric, "
            "name a metric the lab measures, e.g. cpu_ns_per_request",
        )
    kept, values, notes = normalised(runs)
    if not kept:
        raise DataError(
            f"{len(runs)} stored runs of {metric!r}, but no experiment arm has two runs to compare",
            hint="the analysis needs experiments with several trials (or batches) per arm",
        )
    varying: list[str] = []
    levels: dict[str, int] = {}
    for name in factors:
        seen = sorted({run.facts.get(name, UNKNOWN) for run in kept})
        if len(seen) > 1:
            varying.append(name)
            levels[name] = len(seen)
        else:
            notes.append(f"{name} has one level ({seen[0]}) in these runs; left out")
    if not varying:
        raise DataError(
            f"no host fact varies among the {len(kept)} runs of {metric!r}",
            hint="the factor analysis needs runs on hosts that differ, e.g. A/A experiments "
            "on hosts of several CPU models or kernels",
        )
    parameters = 1 + sum(levels[f] - 1 for f in varying)
    # Two more runs than parameters leaves a residual to estimate the noise from.
    needed = parameters + 2
    if len(kept) < needed:
        raise DataError(
            f"{len(kept)} usable runs of {metric!r}; fitting {len(varying)} factors with "
            f"{sum(levels.values())} levels needs at least {needed}",
            hint="run more experiments (or more trials) on these hosts, or narrow the runs "
            "with --service",
        )
    y = np.asarray(values, dtype=np.float64)
    total_ss = float(np.sum((y - y.mean()) ** 2))
    if total_ss <= 0:
        raise DataError(
            f"the {len(kept)} normalised runs of {metric!r} do not vary",
            hint="there is no variance for host facts to explain; try another --metric",
        )
    frame = _frame(kept, values, varying)
    with warnings.catch_warnings():
        # Nested facts (a CPU model implies its architecture) make the design singular;
        # statsmodels warns and gives NaN where a factor adds nothing identifiable.
        warnings.simplefilter("ignore")
        full = _fit(frame, varying)
        anova = _anova(full)
        subsets: list[Subset] = []
        for size in range(1, min(MAX_SUBSET, len(varying)) + 1):
            for combo in itertools.combinations(varying, size):
                model = full if size == len(varying) else _fit(frame, combo)
                subsets.append(Subset(combo, _float(model.rsquared), _float(model.rsquared_adj)))
    alone = {s.factors[0]: s.r2 for s in subsets if len(s.factors) == 1}
    effects = []
    for name in varying:
        row = anova.loc[f"C({name})"]
        sum_sq = _float(row["sum_sq"])
        effects.append(
            FactorEffect(
                factor=name,
                levels=levels[name],
                sum_sq=sum_sq,
                share=sum_sq / total_ss,
                f_value=_float(row["F"]),
                p_value=_float(row["PR(>F)"]),
                r2_alone=alone[name],
            )
        )
    effects.sort(key=lambda e: -e.r2_alone)
    best = []
    for size in sorted({len(s.factors) for s in subsets}):
        best.append(max((s for s in subsets if len(s.factors) == size), key=lambda s: s.r2))
    chosen_cov = [r for r in runs if r.kind in cov_kinds] if cov_runs is None else cov_runs
    cov = cov_per_fact(chosen_cov, min_runs=min_runs)
    if not cov:
        notes.append(
            f"no CPU model or kernel has {min_runs} {'/'.join(cov_kinds).upper()} runs: no CoV "
            "(run `hairline aa` on the hosts)"
        )
    return FactorAnalysis(
        metric=metric,
        runs=len(kept),
        experiments=len({r.experiment for r in kept}),
        factors=tuple(varying),
        r2=_float(full.rsquared),
        r2_adj=_float(full.rsquared_adj),
        effects=tuple(effects),
        best=tuple(best),
        cov=cov,
        cov_p50={
            fact: float(np.median([c.cov for c in cov if c.fact == fact]))
            for fact in dict.fromkeys(c.fact for c in cov)
        },
        cov_kinds=cov_kinds,
        notes=tuple(notes),
    )


def cov_per_fact(
    runs: Sequence[RunValue],
    *,
    facts: Iterable[str] = COV_FACTS,
    min_runs: int = DEFAULT_MIN_RUNS,
) -> tuple[FactCoV, ...]:
    """The CoV (sd / mean, ServiceLab section 4.1) of the normalised runs on hosts with each
    value of each fact; values with fewer than ``min_runs`` runs are left out. Noisiest
    first within each fact."""
    kept, values, _ = normalised(runs)
    out: list[FactCoV] = []
    for fact in facts:
        by_value: dict[str, list[int]] = {}
        for i, run in enumerate(kept):
            by_value.setdefault(run.facts.get(fact, UNKNOWN), []).append(i)
        rows = []
        for value, members in by_value.items():
            if len(members) < max(min_runs, 2):
                continue
            ys = np.asarray([values[i] for i in members])
            mean, sd = float(ys.mean()), float(ys.std(ddof=1))
            rows.append(
                FactCoV(
                    fact=fact,
                    value=value,
                    runs=len(members),
                    experiments=len({kept[i].experiment for i in members}),
                    mean=mean,
                    sd=sd,
                    cov=sd / mean if mean else math.nan,
                )
            )
        out.extend(sorted(rows, key=lambda c: (-c.cov, c.value)))
    return tuple(out)


# -- the store's view ---------------------------------------------------------------------


def factor_analysis(
    store: Store,
    *,
    metric: str = DEFAULT_METRIC,
    service: str | None = None,
    min_runs: int = DEFAULT_MIN_RUNS,
    cov_kinds: tuple[str, ...] = ("aa",),
) -> FactorAnalysis:
    """:func:`analyze_factors` over the stored runs (of ``service``, when given)."""
    runs, notes = load_runs(store, metric=metric, service=service)
    result = analyze_factors(runs, metric=metric, cov_kinds=cov_kinds, min_runs=min_runs)
    if notes:
        return _with_notes(result, notes)
    return result


def _with_notes(result: FactorAnalysis, notes: Sequence[str]) -> FactorAnalysis:
    return dataclasses.replace(result, notes=(*notes, *result.notes))


def cov_by_fact(
    store: Store,
    *,
    metric: str = DEFAULT_METRIC,
    min_runs: int = DEFAULT_MIN_RUNS,
    service: str | None = None,
    facts: Iterable[str] = COV_FACTS,
) -> dict[tuple[str, str], float]:
    """The CoV of ``metric`` per (fact, value) from the stored A/A runs, e.g.
    ``{("kernel", "6.1.0-13"): 0.021, ("cpu_model", "EPYC 7B13"): 0.008}``: what
    allocation consults to avoid noisy CPU models and kernels. Values with fewer than
    ``min_runs`` runs are absent (no basis to judge them); no A/A runs give ``{}``."""
    runs, _ = load_runs(store, metric=metric, service=service, kinds=("aa",))
    return {(c.fact, c.value): c.cov for c in cov_per_fact(runs, facts=facts, min_runs=min_runs)}
