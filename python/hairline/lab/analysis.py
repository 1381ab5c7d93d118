"""From observations to verdicts: warm-up cut, model per metric, threshold, correction.

The one analysis path for ``hairline analyze`` and the lab's analysis phase (DESIGN.md's
loop: warm-up cut -> preprocessing -> model per metric -> effect, CI, p-value -> verdict).

Model choice per metric: a named model is used as given. ``adaptive`` scores every model on
the metric's A/A history (ServiceLab section 4.2) and takes the best; without history, or
when no model qualifies, it falls back to :func:`hairline.stats.fallback_model` and says so.
A/A history is split into runs by its ``experiment`` column, each run one A/A comparison; a
history without it is an error (:func:`history_runs`).

Each candidate arm is compared with one baseline: the experiment's, or the one named for it
(a three-sided experiment, ServiceLab section 3.5: the change against its parent, the
parent against production). The candidates no other arm is compared with decide the outcome
(:attr:`Analysis.deciding`); the other comparisons are context.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hairline.config import MetricPolicy
from hairline.config.policy import metric_family
from hairline.errors import ConfigError, DataError
from hairline.stats import (
    Comparison,
    DegenerateDataWarning,
    MetricRule,
    MetricSample,
    Verdict,
    cut_warmup,
    fallback_model,
    get_model,
    list_models,
    select_model,
    verdicts,
)
from hairline.stats.bootstrap import bootstrap_compare
from hairline.stats.sequential import look_alpha, validate_design
from hairline.store.observations import Observations

__all__ = [
    "Analysis",
    "AnalysisOptions",
    "MetricAnalysis",
    "analyze",
    "history_choice",
    "history_runs",
    "host_pair_trials",
]

Correction = Literal["none", "holm", "bh"]

# Fewer time-ordered rows than this per trial and arm is not a series to find warm-up in.
_MIN_SERIES_ROWS = 20


@dataclass(frozen=True)
class AnalysisOptions:
    model: str = "adaptive"
    alpha: float = 0.05
    policies: dict[str, MetricPolicy] = field(default_factory=dict)
    default_policy: MetricPolicy = field(default_factory=MetricPolicy)
    correction: Correction = "none"
    cut_warmup: bool = True
    seed: int = 0
    #: (first_look, max_trials) to analyse as one look of a sequential design: each metric
    #: is tested, and its interval drawn, at the per-look level of the model it uses
    #: (stats.sequential.look_alpha), so that all looks together keep ``alpha``.
    sequential: tuple[int, int] | None = None


@dataclass(frozen=True)
class MetricAnalysis:
    """One metric of one candidate arm against its baseline arm."""

    metric: str
    candidate: str
    baseline: str
    model: str
    model_reason: str
    warmup_rows_cut: int
    verdict: Verdict
    # Trials on several host pairs: the same comparison with the host pair as the cluster
    # (Perflab's bootstrap, one weight per pair for both arms' rows). None on one pair.
    by_host_pair: Comparison | None = None

    @property
    def comparison(self) -> Comparison:
        return self.verdict.comparison


@dataclass(frozen=True)
class Analysis:
    """Every metric of every candidate; ``baseline`` is the experiment's baseline arm.

    ``deciding`` names the candidates whose verdicts decide the outcome (headline, exit
    status); empty means every candidate (an analysis stored before there was a choice).
    """

    source: str
    baseline: str
    alpha: float
    correction: Correction
    results: tuple[MetricAnalysis, ...]
    deciding: tuple[str, ...] = ()
    # Trials on each host pair, by pair (lab/hostpairs.py); () when they ran on one pair.
    host_pair_trials: tuple[int, ...] = ()

    def decides(self, candidate: str) -> bool:
        """Whether ``candidate``'s verdicts decide the outcome."""
        return not self.deciding or candidate in self.deciding

    @property
    def comparisons(self) -> tuple[tuple[str, str], ...]:
        """(candidate, its baseline) in the order of the results."""
        return tuple(dict.fromkeys((r.candidate, r.baseline) for r in self.results))

    @property
    def chained(self) -> bool:
        """Whether some candidate is compared with an arm other than the baseline (a
        three-sided experiment): then every place that names a candidate names its
        baseline too."""
        return any(r.baseline != self.baseline for r in self.results)

    @property
    def regressions(self) -> tuple[MetricAnalysis, ...]:
        """The regressions that decide the outcome: those of the deciding candidates."""
        return tuple(
            r for r in self.results if r.verdict.label == "regression" and self.decides(r.candidate)
        )

    @property
    def context_regressions(self) -> tuple[MetricAnalysis, ...]:
        """Regressions of the comparisons that do not decide (a three-sided experiment's
        parent against production)."""
        return tuple(
            r
            for r in self.results
            if r.verdict.label == "regression" and not self.decides(r.candidate)
        )


def history_runs(history: Observations, metric: str) -> list[MetricSample]:
    """The A/A runs of ``metric`` in ``history``, one MetricSample per value of its
    ``experiment`` column.

    A history without that column is a ``DataError``: its rows cannot be told apart into
    the runs they came from. Splitting them by trial instead (as hairline once did) made
    every trial a run, so the ci-test sized its interval for one trial and adaptive
    selection scored the models on one-trial runs, whatever the experiment being judged.
    """
    table = history.table
    if "experiment" not in table.column_names:
        raise DataError(
            f"{history.source}: the A/A history has no 'experiment' column, so its rows "
            f"cannot be grouped into the A/A runs they came from",
            hint="add a column 'experiment' naming each row's A/A run (the lab's history "
            "has it); each run should have as many trials as the experiments it judges",
        )
    runs: list[MetricSample] = []
    for experiment in pc.unique(table.column("experiment")).to_pylist():
        part = dataclasses.replace(
            history, table=table.filter(pc.equal(table.column("experiment"), experiment))
        )
        runs.extend(s for m, _, s in part.samples() if m == metric)
    return runs


def history_choice(
    history: list[MetricSample], *, alpha: float, rng: np.random.Generator
) -> tuple[str | None, str]:
    """What adaptive selection makes of a metric's A/A runs: the best model and why, or
    None and why none (fewer than two runs, or no model qualified), in which case the
    analysis falls back to :func:`hairline.stats.fallback_model`. The A/A health page
    shows this same choice."""
    if len(history) < 2:
        return None, "adaptive: no A/A history for this metric"
    with warnings.catch_warnings():
        # Models that cannot run on these runs are scored as such, not shouted about.
        warnings.simplefilter("ignore", DegenerateDataWarning)
        selection = select_model(history, rng=rng, alpha=alpha)
    if selection.best is not None:
        return selection.best, f"adaptive: best of {len(history)} A/A runs"
    return None, f"adaptive: no model qualified on the A/A runs ({selection.reason})"


def _choose(
    metric: str,
    sample: MetricSample,
    options: AnalysisOptions,
    history: list[MetricSample],
    rng: np.random.Generator,
) -> tuple[str, str]:
    if options.model != "adaptive":
        return options.model, "chosen by the user"
    best, reason = history_choice(history, alpha=options.alpha, rng=rng)
    if best is not None:
        return best, reason
    return fallback_model(sample, alpha=options.alpha), reason + "; fallback model"


def _comparisons(
    observations: Observations, root: str, baselines: Mapping[str, str]
) -> dict[str, str]:
    """Each candidate of ``observations`` and the arm it is compared with."""
    if root not in observations.arms:
        raise DataError(
            f"{observations.source}: baseline arm {root!r} does not occur in column 'arm'",
            hint=f"choose one of {', '.join(observations.arms)}",
        )
    for candidate, base in baselines.items():
        for arm in (candidate, base):
            if arm not in observations.arms:
                raise DataError(
                    f"{observations.source}: the comparison {candidate} against {base} names "
                    f"arm {arm!r}, which does not occur in column 'arm'",
                    hint=f"name arms of the observations: {', '.join(observations.arms)}",
                )
        if candidate in (base, root):
            raise DataError(
                f"{observations.source}: arm {candidate!r} cannot be compared with {base!r}",
                hint=f"compare a candidate with another arm; {root!r} is the baseline",
            )
    return {a: baselines.get(a, root) for a in observations.arms if a != root}


def _groups(
    observations: Observations, comparisons: Mapping[str, str]
) -> list[tuple[str, Observations]]:
    """One part of ``observations`` per baseline arm: it and the candidates compared with
    it. With one baseline (an A/B) that is the whole table, untouched."""
    by_base: dict[str, list[str]] = {}
    for candidate, base in comparisons.items():
        by_base.setdefault(base, []).append(candidate)
    if len(by_base) == 1:
        return [(next(iter(by_base)), observations)]
    table = observations.table
    parts = []
    for base, candidates in by_base.items():
        arms = (base, *candidates)
        rows = table.filter(pc.is_in(table.column("arm"), pa.array(arms)))
        parts.append((base, dataclasses.replace(observations, table=rows, arms=arms)))
    return parts


def _deciding(comparisons: Mapping[str, str]) -> tuple[str, ...]:
    named = set(comparisons.values())
    return tuple(c for c in comparisons if c not in named) or tuple(comparisons)


def analyze(
    observations: Observations,
    options: AnalysisOptions,
    *,
    history: Observations | None = None,
    baseline: str | None = None,
    baselines: Mapping[str, str] | None = None,
) -> Analysis:
    """Verdicts for every metric (and every candidate arm) of ``observations``.

    Each candidate is compared with ``baselines[candidate]`` when given, else with
    ``baseline`` (default: the observations' first arm).
    """
    if options.model != "adaptive" and options.model not in list_models():
        raise ConfigError(
            f"unknown model {options.model!r}",
            hint=f"use adaptive or one of {', '.join(list_models())}",
        )
    if options.sequential is not None:
        try:
            validate_design(*options.sequential)
        except ValueError as err:
            raise ConfigError(f"sequential design: {err}") from None
    root = baseline or observations.baseline
    against = _comparisons(observations, root, baselines or {})
    rng = np.random.default_rng(options.seed)
    # Its own stream, so that the verdicts of one pair's trials draw what they always did.
    pair_rng = np.random.default_rng([options.seed, 1])
    pair_trials = host_pair_trials(observations)
    pair_samples = _pair_samples(observations, against) if len(pair_trials) > 1 else {}
    clustered: dict[tuple[str, str], Comparison] = {}
    results: list[MetricAnalysis] = []
    by_candidate: dict[str, dict[str, Comparison]] = {}
    chosen: dict[tuple[str, str], tuple[str, str, int]] = {}
    samples = (
        (metric, candidate, sample)
        for base, part in _groups(observations, against)
        for metric, candidate, sample in part.samples(baseline=base)
    )
    for metric, candidate, sample in samples:
        cut_rows = 0
        if options.cut_warmup and _is_series(sample):
            cut = cut_warmup(sample)
            sample, cut_rows = cut.sample, cut.n_cut
        runs = history_runs(history, metric) if history is not None else []
        model, reason = _choose(metric, sample, options, runs, rng)
        try:
            alpha = _level(options, model, fallback=reason.endswith("fallback model"))
            with warnings.catch_warnings():
                # Degenerate data is reported in Comparison.warnings; no stderr noise.
                warnings.simplefilter("ignore", DegenerateDataWarning)
                comparison = get_model(model)(sample, alpha=alpha, rng=rng, history=runs or None)
        except ValueError as err:
            raise DataError(
                f"{observations.source}: metric {metric!r} with model {model}: {err}",
                hint="choose another --model, or add the missing column",
            ) from None
        by_candidate.setdefault(candidate, {})[metric] = comparison
        chosen[(candidate, metric)] = (model, reason, cut_rows)
        by_pair = pair_samples.get((metric, candidate))
        if by_pair is not None:
            clustered[(candidate, metric)] = _by_host_pair(
                by_pair, alpha, pair_rng, cut=bool(cut_rows)
            )

    for candidate, comparisons in by_candidate.items():
        rules = {m: _rule(_policy(options, m)) for m in comparisons}
        for metric, verdict in verdicts(comparisons, rules, correction=options.correction).items():
            model, reason, cut_rows = chosen[(candidate, metric)]
            results.append(
                MetricAnalysis(
                    metric=metric,
                    candidate=candidate,
                    baseline=against[candidate],
                    model=model,
                    model_reason=reason,
                    warmup_rows_cut=cut_rows,
                    verdict=verdict,
                    by_host_pair=clustered.get((candidate, metric)),
                )
            )
    return Analysis(
        source=observations.source,
        baseline=root,
        alpha=options.alpha,
        correction=options.correction,
        results=tuple(results),
        deciding=_deciding(against),
        host_pair_trials=pair_trials if len(pair_trials) > 1 else (),
    )


def host_pair_trials(observations: Observations) -> tuple[int, ...]:
    """How many trials ran on each host pair, by pair: the rows' hosts are positions in
    the experiment's allocation, one host per arm and pair (lab/hostpairs.py)."""
    table = observations.table
    if "host" not in table.column_names or "trial" not in table.column_names:
        return ()
    host = table.column("host").to_numpy(zero_copy_only=False)
    trial = table.column("trial").to_numpy(zero_copy_only=False)
    pair = np.asarray(host, dtype=np.int64) // max(1, len(observations.arms))
    per_pair = np.zeros(int(pair.max()) + 1 if len(pair) else 0, dtype=np.int64)
    for p in np.unique(pair):
        per_pair[p] = len(np.unique(trial[pair == p]))
    return tuple(int(n) for n in per_pair)


def _pair_samples(
    observations: Observations, against: Mapping[str, str]
) -> dict[tuple[str, str], MetricSample]:
    """Each (metric, candidate) sample with the host pair in place of the host: the rows'
    hosts are positions in the allocation, ``pair * arms + i``."""
    table = observations.table
    pair = pc.divide(pc.cast(table.column("host"), pa.int64()), len(observations.arms))
    by_pair = dataclasses.replace(
        observations, table=table.set_column(table.schema.get_field_index("host"), "host", pair)
    )
    return {
        (metric, candidate): sample
        for base, part in _groups(by_pair, against)
        for metric, candidate, sample in part.samples(baseline=base)
    }


def _by_host_pair(
    sample: MetricSample, alpha: float, rng: np.random.Generator, *, cut: bool
) -> Comparison:
    """``sample`` (its host the host pair) compared with the host pair as the cluster: the
    existing clustered bootstrap (stats/bootstrap.py, cluster "host"), in which both arms'
    rows on one pair share one weight, so that trials on one pair count as one cluster of
    whatever that pair does to the difference. Warm-up cut as the verdict's sample was."""
    if cut:
        sample = cut_warmup(sample).sample
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateDataWarning)
        return bootstrap_compare(sample, cluster="host", alpha=alpha, rng=rng)


def _level(options: AnalysisOptions, model: str, *, fallback: bool) -> float:
    """The level of one metric's test and interval: alpha, or at a look of a sequential
    design the per-look level of the models its looks use (the fallback's sequence of
    models when the fallback chose, else this model at every look)."""
    if options.sequential is None:
        return options.alpha
    first_look, max_trials = options.sequential
    return look_alpha(options.alpha, first_look, max_trials, None if fallback else model)


def _policy(options: AnalysisOptions, metric: str) -> MetricPolicy:
    """The metric's own policy, else its family's (``name[endpoint]``: the name's), else the
    default."""
    found = options.policies.get(metric) or options.policies.get(metric_family(metric))
    return found or options.default_policy


def _rule(policy: MetricPolicy) -> MetricRule:
    return MetricRule(
        threshold=policy.threshold.value,
        kind="relative" if policy.threshold.relative else "absolute",
        direction=policy.direction,
    )


def _is_series(sample: MetricSample) -> bool:
    """Whether each trial and arm has a time series long enough to look for warm-up in."""
    if sample.t is None or np.all(sample.t == sample.t[0]):
        return False
    trial = np.zeros(len(sample), dtype=np.int64) if sample.trial is None else sample.trial
    keys = trial * 2 + sample.arm
    return bool(np.bincount(keys - keys.min()).max() >= _MIN_SERIES_ROWS) and bool(
        np.min(np.unique(keys, return_counts=True)[1]) >= _MIN_SERIES_ROWS
    )
