"""Adaptive model selection per (service, metric) (servicelab-osdi24 section 4.2), and the
model used when there is no history to select from.

ServiceLab runs periodic A/A experiments and artificial A/B experiments (A/A runs with a
regression injected into one side) as ground truth, and scores every model by its
false-positive rate (from the A/A runs), its false-negative rate (from the artificial A/B
runs) and its detectability (from the A/A runs, after Bloom's minimum detectable effect).

hairline measures, for each model:

- ``fpr``: the share of A/A runs with p < alpha. ``fpr_consistent`` is whether that count is
  compatible with a true rate of at most alpha: the one-sided binomial test of
  "rate > alpha" does not reject at 5%. (With 20 runs and alpha 0.05, up to 3 false
  positives pass; a stricter cap would reject calibrated models for lack of runs.)
- ``fnr``: the share of artificial A/B runs (arm B of each A/A run scaled by
  1 + ``injected_rel``) that the model misses: p >= alpha, or an effect of the wrong sign.
- ``mde_rel``: Bloom's minimum detectable effect, (z_{1-alpha/2} + z_{power})·SE, with SE the
  median over the A/A runs of the model's interval half-width divided by z_{1-alpha/2}.

The rule: among the models that ran on every run and whose FPR is consistent with alpha,
the best has the lowest FNR at the injected effect, and among equal FNRs the smallest MDE.
Pick ``injected_rel`` near the metric's threshold, where missing a regression matters. If
no model qualifies, there is no best model (``best is None``) and the selection says why.

The ci-test is scored leave-one-out: run i is judged against the history of the other runs,
so that no run is compared with itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from hairline.stats import dist
from hairline.stats.certificate import mde
from hairline.stats.citest import aa_differences
from hairline.stats.data import ARM_A, ARM_B, MetricSample
from hairline.stats.models import PAPER_MODELS, list_models, model_info, per_trial_fallback
from hairline.stats.preprocess import OUTLIER_METHODS, is_aggregate

__all__ = [
    "DEFAULT_INJECTED_REL",
    "ModelScore",
    "Selection",
    "evaluate_model",
    "fallback_model",
    "inject_regression",
    "select_model",
]

DEFAULT_INJECTED_REL = 0.01
_FPR_TEST_LEVEL = 0.05


@dataclass(frozen=True)
class ModelScore:
    """How one model did on a service's A/A runs and artificial A/B runs."""

    model: str
    applicable: bool
    reason: str | None
    n_runs: int
    false_positives: int
    fpr: float
    fpr_upper: float
    fpr_consistent: bool
    fnr: float
    injected_rel: float
    mde_rel: float


@dataclass(frozen=True)
class Selection:
    """The scores of every candidate model and the best one (``None`` if none qualifies)."""

    best: str | None
    scores: tuple[ModelScore, ...]
    alpha: float
    power: float
    injected_rel: float
    reason: str

    def score(self, model: str) -> ModelScore:
        """The score of ``model``; ``KeyError`` if it was not a candidate."""
        for found in self.scores:
            if found.model == model:
                return found
        raise KeyError(model)


def _validate_inject(sample: MetricSample, effect_rel: float) -> None:
    if not math.isfinite(effect_rel) or effect_rel <= -1.0:
        raise ValueError(f"effect_rel must be a finite fraction above -1, got {effect_rel!r}")
    if not np.any(sample.arm == ARM_B):
        raise ValueError("the sample has no rows of arm B to inject a regression into")


def inject_regression(sample: MetricSample, effect_rel: float) -> MetricSample:
    """An artificial A/B run: arm B's values multiplied by 1 + ``effect_rel``.

    A multiplicative change moves the mean by exactly ``effect_rel`` and scales the spread
    with it, as a uniformly slower build does.
    """
    _validate_inject(sample, effect_rel)
    factor = np.where(sample.arm == ARM_B, 1.0 + effect_rel, 1.0)
    return replace(sample, value=sample.value * factor)


def _fpr_bounds(false_positives: int, n_runs: int, alpha: float) -> tuple[float, bool]:
    # Clopper–Pearson one-sided 95% upper bound, and the binomial test of rate > alpha.
    upper = (
        1.0
        if false_positives >= n_runs
        else float(
            dist.beta_ppf(1.0 - _FPR_TEST_LEVEL, false_positives + 1, n_runs - false_positives)
        )
    )
    p_excess = dist.binom_sf(false_positives - 1, n_runs, alpha)
    return upper, p_excess >= _FPR_TEST_LEVEL


def _validate_evaluate(
    aa_runs: Sequence[MetricSample], alpha: float, power: float, injected_rel: float
) -> None:
    if len(aa_runs) < 2:
        raise ValueError(f"model selection needs at least 2 A/A runs, got {len(aa_runs)}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power!r}")
    if not math.isfinite(injected_rel) or injected_rel <= 0.0:
        raise ValueError(
            f"injected_rel must be a positive fraction (a regression), got {injected_rel!r}"
        )
    for i, run in enumerate(aa_runs):
        if not (np.any(run.arm == ARM_A) and np.any(run.arm == ARM_B)):
            raise ValueError(f"A/A run {i} needs rows of both arms (0 = A, 1 = A')")


def evaluate_model(
    name: str,
    aa_runs: Sequence[MetricSample],
    *,
    rng: np.random.Generator,
    alpha: float = 0.05,
    power: float = 0.8,
    injected_rel: float = DEFAULT_INJECTED_REL,
) -> ModelScore:
    """Score one model on A/A runs and on the same runs with ``injected_rel`` added to B.

    A model that cannot run on these runs (a missing column, no history) or that returns NaN
    on any run is scored ``applicable=False`` with the reason.
    """
    _validate_evaluate(aa_runs, alpha, power, injected_rel)
    info = model_info(name)
    n_runs = len(aa_runs)

    def not_applicable(reason: str) -> ModelScore:
        nan = math.nan
        return ModelScore(name, False, reason, n_runs, 0, nan, nan, False, nan, injected_rel, nan)

    differences = None
    if info.needs_history:
        # A metric that is 0 in a run's baseline (an error rate of a healthy service) has no
        # relative difference: the ci-test cannot score it. Raised here, it failed every
        # experiment of a service with two A/A runs in its history ("internal error").
        try:
            differences = aa_differences(aa_runs)
        except ValueError as error:
            return not_applicable(str(error))

    p_aa = np.empty(n_runs)
    half_widths = np.empty(n_runs)
    p_ab = np.empty(n_runs)
    effect_ab = np.empty(n_runs)
    for i, run in enumerate(aa_runs):
        history = None
        if differences is not None:
            history = [float(d) for d in np.delete(differences, i)]
        try:
            run.require(*info.needs_columns)
            aa = info.run(run, alpha=alpha, rng=rng, history=history)
            ab = info.run(
                inject_regression(run, injected_rel), alpha=alpha, rng=rng, history=history
            )
        except ValueError as error:
            return not_applicable(f"A/A run {i}: {error}")
        if not (math.isfinite(aa.p_value) and math.isfinite(ab.p_value)):
            return not_applicable(f"A/A run {i}: the model returned NaN ({'; '.join(aa.warnings)})")
        p_aa[i] = aa.p_value
        half_widths[i] = (aa.ci_rel[1] - aa.ci_rel[0]) / 2.0
        p_ab[i] = ab.p_value
        effect_ab[i] = ab.effect_rel
    false_positives = int(np.count_nonzero(p_aa < alpha))
    upper, consistent = _fpr_bounds(false_positives, n_runs, alpha)
    detected = (p_ab < alpha) & (effect_ab > 0)
    half_width = float(np.median(half_widths))
    detectable = mde((-half_width, half_width), alpha, power=power)
    return ModelScore(
        model=name,
        applicable=True,
        reason=None,
        n_runs=n_runs,
        false_positives=false_positives,
        fpr=false_positives / n_runs,
        fpr_upper=upper,
        fpr_consistent=consistent,
        fnr=1.0 - float(np.mean(detected)),
        injected_rel=injected_rel,
        mde_rel=math.nan if detectable is None else detectable,
    )


#: Fewer hosts than this give the host bootstrap too few clusters to resample (Perflab's
#: simulations use 16; its small-cluster correction keeps 8 close to nominal).
MIN_BOOTSTRAP_HOSTS = 8


def _enough_hosts(sample: MetricSample) -> bool:
    """Whether a host-clustered bootstrap can say anything about ``sample``'s spread: each
    arm on 2 hosts or more, and ``MIN_BOOTSTRAP_HOSTS`` in all."""
    if sample.host is None:
        return False
    hosts_a = len(np.unique(sample.host[sample.arm == ARM_A]))
    hosts_b = len(np.unique(sample.host[sample.arm == ARM_B]))
    return min(hosts_a, hosts_b) >= 2 and len(np.unique(sample.host)) >= MIN_BOOTSTRAP_HOSTS


def _default_candidates(aa_runs: Sequence[MetricSample]) -> list[str]:
    # The paper's seven, plus Welch, plus the bootstraps the data has clusters for. The
    # outlier preprocessings act on per-request rows only: for a metric aggregated per batch
    # (one row per trial, batch and arm) they are not candidates at all, rather than
    # candidates that fail on every run.
    columns = {
        name
        for name in ("trial", "request", "batch")
        if all(getattr(run, name) is not None for run in aa_runs)
    }
    # The host bootstraps only where fallback_model would take one: a local lab's two CPU
    # sets resampled as two clusters gave latency_us intervals of about +-0.7% where the
    # paired t gave +-18% (bench/stats/tail_aa.py --shared-home, 2026-11-29), and a short
    # A/A history cannot show such a model's false positives before it wins on power.
    if all(_enough_hosts(run) for run in aa_runs):
        columns.add("host")
    per_request = not any(is_aggregate(run) for run in aa_runs)
    chosen = [
        name
        for name in (*PAPER_MODELS, "welch-none", "trimmed-t-none")
        if per_request or model_info(name).preprocessing not in OUTLIER_METHODS
    ]
    for name in list_models():
        info = model_info(name)
        if info.test == "bootstrap" and set(info.needs_columns) <= columns and info.needs_columns:
            chosen.append(name)
    return chosen


def select_model(
    aa_runs: Sequence[MetricSample],
    *,
    rng: np.random.Generator,
    models: Sequence[str] | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    injected_rel: float = DEFAULT_INJECTED_REL,
) -> Selection:
    """Score every candidate model on a service's A/A runs and pick the best (module text).

    ``models`` defaults to the paper's seven, welch-none, trimmed-t-none, and the clustered
    bootstraps whose columns the runs have (without the outlier preprocessings when the
    runs are batch-level aggregates).
    """
    _validate_evaluate(aa_runs, alpha, power, injected_rel)
    candidates = list(models) if models is not None else _default_candidates(aa_runs)
    for name in candidates:
        model_info(name)  # an unknown name fails here, before any work
    scores = tuple(
        evaluate_model(name, aa_runs, rng=rng, alpha=alpha, power=power, injected_rel=injected_rel)
        for name in candidates
    )
    eligible = [s for s in scores if s.applicable and s.fpr_consistent]
    if not eligible:
        reason = (
            "no model ran on every run with a false-positive rate consistent with alpha "
            f"{alpha}; add A/A runs or trials, or check the runs for drift"
        )
        return Selection(None, scores, alpha, power, injected_rel, reason)
    best = min(eligible, key=lambda s: (s.fnr, s.mde_rel))
    reason = (
        f"{best.model}: lowest false-negative rate ({best.fnr:.0%}) at a {injected_rel:.2%} "
        f"regression among {len(eligible)} models with false-positive rates consistent with "
        f"alpha {alpha}; minimum detectable effect {best.mde_rel:.3%}"
    )
    return Selection(best.model, scores, alpha, power, injected_rel, reason)


def _validate_fallback(sample: MetricSample, alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def fallback_model(sample: MetricSample, *, alpha: float = 0.05) -> str:
    """The model used when there is no A/A history to select from.

    1. ``bootstrap-host`` when there are at least ``MIN_BOOTSTRAP_HOSTS`` hosts: Perflab
       (table 3) shows the host-clustered bootstrap holds its type I error in every design,
       because hosts are the coarsest source of correlated noise and it resamples whole
       hosts. With a handful of hosts (a local lab has two CPU sets) resampling them says
       almost nothing about the spread, so fewer hosts fall through to the next rule.
    2. ``trimmed-t-none`` with 5 trials or more: Yuen's 20%-trimmed t-test on per-trial
       relative differences. Like the sign-flip and paired tests it uses only per-trial
       differences, so noise a trial's arms share cancels; unlike them, one trial whose
       batch went wrong cannot overturn the others (six of seven trials at +6% and one at
       -6.5% is a regression to it, and not to either of them).
    3. ``paired-t-none`` with 2 to 4 trials: nothing can be trimmed yet, and the trimmed
       test would be this same t-test; the differences are means over many requests, so
       close to normal.
    4. ``welch-none`` otherwise: a single trial (ServiceLab's t-test case). Welch rather than
       Student because the arms can differ in spread and row count, where a pooled variance
       misstates the error; when they do not, Welch loses almost nothing.

    ``alpha`` is checked but no longer changes the choice: the trimmed test reaches any
    alpha, where the exact sign-flip test needed 2/2^m <= alpha/2.
    """
    _validate_fallback(sample, alpha)
    if _enough_hosts(sample):
        return "bootstrap-host"
    trials = 0 if sample.trial is None else len(np.unique(sample.trial))
    return per_trial_fallback(trials)
