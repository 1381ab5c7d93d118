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
import json
import math
import warnings
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import and_, select

from hairline.errors import DataError
from hairline.store.db import Store
from hairline.store.models import Experiment, Host, Run, Service, Trial

__all__ = [
    "COV_FACTS",
    "DEFAULT_METRIC",
    "DEFAULT_MIN_RUNS",
    "FACTORS",
    "FactCoV",
    "FactorAnalysis",
    "FactorEffect",
    "RunValue",
    "Subset",
    "analyze_factors",
    "cov_by_fact",
    "cov_per_fact",
    "factor_analysis",
    "load_runs",
    "normalised",
]

DEFAULT_METRIC = "cpu_ns_per_request"
# The facts a host can differ in that may change how fast the same code runs (ServiceLab
# section 4.1: server type, CPU architecture, kernel release, turbo, region; hostname,
# cores and memory are the machine's identity or size, not its class).
FACTORS = ("server_type", "cpu_arch", "cpu_model", "kernel", "region", "turbo", "governor", "smt")
COV_FACTS = ("cpu_model", "kernel")
# Fewer runs than this is no basis for calling a CPU model or kernel noisy.
DEFAULT_MIN_RUNS = 10
# Subsets of up to this many factors are searched (the paper's answer had three).
MAX_SUBSET = 3
# Names facts have in a run's JSON (hosts.facts.HostFacts) that differ from the factor's.
_ALIASES = {"cpu_arch": ("arch",)}
# The host columns a missing fact falls back to.
_HOST_COLUMNS = ("region", "server_type", "cpu_arch", "cpu_model", "kernel")
_UNKNOWN = "unknown"
_RUN_COLUMNS = (Run.experiment_id, Run.trial, Run.batch, Run.arm, Run.facts)


@dataclass(frozen=True)
class RunValue:
    """One run: an arm on a host in one batch, its metric's mean, its host's facts."""

    experiment: int
    kind: str  # "ab" | "aa"
    service: str
    trial: int
    batch: int
    arm: str
    host: str  # the host's name
    value: float
    facts: Mapping[str, str]


@dataclass(frozen=True)
class FactorEffect:
    """One factor in the fit with all factors (type II ANOVA), and alone."""

    factor: str
    levels: int
    sum_sq: float  # what it explains beyond every other factor
    share: float  # sum_sq as a fraction of the total sum of squares
    f_value: float
    p_value: float
    r2_alone: float  # R² of a fit on this factor alone


@dataclass(frozen=True)
class Subset:
    factors: tuple[str, ...]
    r2: float
    r2_adj: float


@dataclass(frozen=True)
class FactCoV:
    """The spread of the normalised runs on hosts with one value of one fact."""

    fact: str
    value: str
    runs: int
    experiments: int
    mean: float
    sd: float
    cov: float  # sd / mean


@dataclass(frozen=True)
class FactorAnalysis:
    metric: str
    runs: int
    experiments: int
    factors: tuple[str, ...]  # those that vary, in the fit
    r2: float  # with all factors: the upper bound
    r2_adj: float
    effects: tuple[FactorEffect, ...]  # best alone first
    best: tuple[Subset, ...]  # the best subset of each size, 1 up to 3
    cov: tuple[FactCoV, ...]  # noisiest first within each fact
    cov_p50: dict[str, float]  # per fact, the median CoV of its values
    cov_kinds: tuple[str, ...]  # the experiment kinds the CoV comes from
    notes: tuple[str, ...]


# -- reading the store --------------------------------------------------------------------


def _fact(name: str, run_facts: Mapping[str, Any], host: Mapping[str, Any]) -> str:
    for key in (name, *_ALIASES.get(name, ())):
        value = run_facts.get(key)
        if value is not None and str(value) != "":
            return str(value)
    value = host.get(name)
    return _UNKNOWN if value is None or str(value) == "" else str(value)


def _run_means(path: Path, metric: str) -> dict[tuple[int, int, str], float]:
    """The metric's mean per (trial, batch, arm) of one trial's observations file.

    Read with pyarrow's column and row filters rather than ``read_observations``: a
    trial's file is mostly per-request latency rows, and a lab has thousands of them.
    """
    table = pq.read_table(
        path,
        columns=["trial", "batch", "arm", "metric", "value"],
        filters=[("metric", "=", metric)],
    )
    if table.num_rows == 0:
        return {}
    means = table.group_by(["trial", "batch", "arm"]).aggregate([("value", "mean")])
    columns = (means.column(c).to_pylist() for c in ("trial", "batch", "arm", "value_mean"))
    return {(int(t), int(b), str(a)): float(v) for t, b, a, v in zip(*columns, strict=True)}


def load_runs(
    store: Store,
    *,
    metric: str = DEFAULT_METRIC,
    service: str | None = None,
    kinds: Collection[str] | None = None,
) -> tuple[list[RunValue], list[str]]:
    """Every run of a done trial with the metric's mean over it, and notes on what could
    not be read. ``service`` and ``kinds`` ("ab", "aa") narrow the experiments."""
    where = [Trial.state == "done"]
    if service is not None:
        where.append(Service.name == service)
    if kinds is not None:
        where.append(Experiment.kind.in_(sorted(kinds)))
    with store.transaction() as session:
        trials = session.execute(
            select(Experiment.id, Experiment.kind, Service.name, Trial.index, Trial.observations)
            .join(Service, Service.id == Experiment.service_id)
            .join(Trial, Trial.experiment_id == Experiment.id)
            .where(*where)
            .order_by(Experiment.id, Trial.index)
        ).all()
        runs = session.execute(
            select(*_RUN_COLUMNS, Host.name, *(getattr(Host, c) for c in _HOST_COLUMNS))
            .join(Host, Host.id == Run.host_id)
            .join(Experiment, Experiment.id == Run.experiment_id)
            .join(Service, Service.id == Experiment.service_id)
            .join(Trial, and_(Trial.experiment_id == Run.experiment_id, Trial.index == Run.trial))
            .where(*where)
            .order_by(Run.id)
        ).all()
    # A batch run again (spoiled, or its host lost) has several runs; the last one is the
    # one whose observations were kept.
    placed: dict[tuple[int, int, int, str], tuple[str, dict[str, str]]] = {}
    for eid, trial, batch, arm, facts_json, host_name, *columns in runs:
        try:
            run_facts = json.loads(facts_json) if facts_json else {}
        except ValueError:
            run_facts = {}
        host = dict(zip(_HOST_COLUMNS, columns, strict=True))
        facts = {name: _fact(name, run_facts, host) for name in FACTORS}
        placed[(eid, trial, batch, arm)] = (host_name, facts)
    out: list[RunValue] = []
    unreadable: list[str] = []
    unplaced = 0
    for eid, kind, name, index, path in trials:
        if not path:
            continue
        try:
            means = _run_means(Path(path), metric)
        except (OSError, pa.ArrowException) as err:
            unreadable.append(f"{path} ({err})")
            continue
        for (trial, batch, arm), value in means.items():
            where_ran = placed.get((eid, trial, batch, arm))
            if where_ran is None or trial != index:
                unplaced += 1
                continue
            host_name, facts = where_ran
            out.append(RunValue(eid, kind, name, trial, batch, arm, host_name, value, facts))
    notes = []
    if unreadable:
        notes.append(
            f"{len(unreadable)} trial observation files could not be read and were left out "
            f"(first: {unreadable[0]})"
        )
    if unplaced:
        notes.append(f"{unplaced} runs have observations but no record of their host; left out")
    return out, notes


# -- pure analysis ------------------------------------------------------------------------


def _group(run: RunValue) -> tuple[int, str]:
    # An A/A's arms run the same build; an A/B's differ by the change.
    return (run.experiment, "" if run.kind == "aa" else run.arm)


def normalised(runs: Sequence[RunValue]) -> tuple[list[RunValue], list[float], list[str]]:
    """The runs that can be normalised, each value divided by the mean of its experiment
    (and arm, in an A/B), and notes on what was left out.

    A group of one run says nothing (its value becomes exactly 1), nor does one whose mean
    is 0 or not finite (a metric that is always 0, such as an error rate).
    """
    groups: dict[tuple[int, str], list[int]] = {}
    for i, run in enumerate(runs):
        groups.setdefault(_group(run), []).append(i)
    kept: list[RunValue] = []
    values: list[float] = []
    single = zero = 0
    for members in groups.values():
        if len(members) < 2:
            single += 1
            continue
        mean = float(np.mean([runs[i].value for i in members]))
        if not math.isfinite(mean) or mean == 0:
            zero += 1
            continue
        for i in members:
            kept.append(runs[i])
            values.append(runs[i].value / mean)
    notes = []
    if single:
        notes.append(f"{single} experiment arms with a single run left out (nothing to compare)")
    if zero:
        notes.append(f"{zero} experiment arms whose mean is 0 or not finite left out")
    return kept, values, notes


def _frame(runs: Sequence[RunValue], values: Sequence[float], factors: Sequence[str]) -> Any:
    import pandas as pd

    data: dict[str, Any] = {"value": np.asarray(values, dtype=np.float64)}
    for name in factors:
        data[name] = [run.facts.get(name, _UNKNOWN) for run in runs]
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
        seen = sorted({run.facts.get(name, _UNKNOWN) for run in kept})
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
            by_value.setdefault(run.facts.get(fact, _UNKNOWN), []).append(i)
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
