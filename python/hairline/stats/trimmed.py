"""Yuen's trimmed-mean t-test on per-trial differences: the multi-trial model that one
outlying trial cannot overturn.

Per trial i the difference is relative, d_i = mean(B rows of trial i) / mean(A rows of trial
i) - 1, so that trials run at different levels (another host, another hour) weigh alike;
when a trial's baseline mean is 0 (an error rate) relative differences do not exist and the
absolute ones, mean(B) - mean(A), are used instead (``details["relative"]`` says which).

With m trials, g = floor(0.2·m) of them are trimmed at each end and h = m - 2g remain:

    trimmed mean  x_t = mean of d_(g+1) .. d_(m-g)          (sorted d)
    winsorised variance s_w² = variance (m - 1 divisor) of d with the g lowest set to
                               d_(g+1) and the g highest to d_(m-g)
    standard error  se = sqrt((m - 1)·s_w² / (h·(h - 1)))
    statistic       T = x_t / se

(Tukey and McLaughlin; Yuen 1974; Wilcox, "Introduction to Robust Estimation", section 4.4).
With fewer than 5 trials g = 0 and this is the one-sample t-test, exact for normal d with
m - 1 degrees of freedom. For g >= 1 Yuen refers T to Student's t with h - 1 degrees of
freedom; with the few trials of a lab that is liberal (measured on normal d: 6.2% false
positives at alpha 5% with 5 or 10 trials, 1.2 to 1.5 times alpha at alpha 1%). hairline
instead refers T to its own null distribution for normal d: 65,536 draws of m standard
normal values per (m, g), drawn once from a fixed seed and cached, so that the test is as
exact for normal trials as the t-test is, and trimming only adds robustness.

The p-value is (1 + #{null |T| >= |T_obs|}) / (1 + 65,536). The (1 - alpha) interval inverts
the same test: x_t ± q·se, q the largest |T| that the same count still accepts, so it
excludes 0 exactly when p < alpha. For g = 0 both come from Student's t(m - 1).

Why: with 2 to 6 trials the paired t-test, and from 7 the exact sign-flip test, were the
fallback; both use every trial with full weight, so one trial whose batch ran 25% below every
other (a noisy neighbour, a host hiccup) swamps six that agree. Trimming removes it from
the estimate and winsorising from the spread (tests/stats/test_trimmed.py and docs/stats.md
have the figures).

:func:`trimmed_t_core` is the computation on arrays of per-trial differences (any leading
shape); the planning and sequential simulations call it so that they judge exactly what
the model does.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from hairline.stats._modelkit import (
    FloatArray,
    agree_with_p,
    comparison_from_relative,
    comparison_from_shift,
    nan_comparison,
    t_decision,
    warn_degenerate,
)
from hairline.stats.data import ARM_A, ARM_B, Comparison, MetricSample
from hairline.stats.permutation import per_trial_means
from hairline.stats.preprocess import (
    DEFAULT_OUTLIER_PERCENTILE,
    Preprocessing,
    preprocess,
    validate_test_arguments,
)

__all__ = [
    "NULL_DRAWS",
    "TRIM",
    "TrimmedCore",
    "trimmed_count",
    "trimmed_t_core",
    "trimmed_t_test",
]

#: Share of trials trimmed at each end (Wilcox's recommendation for location tests).
TRIM = 0.2
#: Draws of the statistic's null distribution per trial count.
NULL_DRAWS = 1 << 16
_NULL_CHUNK = 1 << 13
_NULL_SEED = 20_240_601


@dataclass(frozen=True)
class TrimmedCore:
    """The trimmed-mean test on the last axis of an array of per-trial differences."""

    estimate: FloatArray
    se: FloatArray
    trimmed: int
    p_value: FloatArray
    ci: tuple[FloatArray, FloatArray]


def trimmed_count(trials: int, trim: float = TRIM) -> int:
    """g, the trials trimmed at each end: floor(trim · trials)."""
    return math.floor(trim * trials)


def _statistic_parts(values: FloatArray, g: int) -> tuple[FloatArray, FloatArray]:
    """Trimmed mean and its standard error along the last axis."""
    m = values.shape[-1]
    h = m - 2 * g
    ordered = np.sort(values, axis=-1)
    estimate = np.mean(ordered[..., g : m - g], axis=-1)
    winsorised = ordered
    if g:
        winsorised = ordered.copy()
        winsorised[..., :g] = ordered[..., g : g + 1]
        winsorised[..., m - g :] = ordered[..., m - g - 1 : m - g]
    variance = np.var(winsorised, axis=-1, ddof=1)
    se = np.sqrt((m - 1) * variance / (h * (h - 1)))
    return estimate, se


@functools.lru_cache(maxsize=128)
def _null_abs_statistic(trials: int, g: int) -> FloatArray:
    """|T| for NULL_DRAWS sets of ``trials`` standard normal differences, sorted."""
    rng = np.random.default_rng([_NULL_SEED, trials, g])
    parts = []
    for start in range(0, NULL_DRAWS, _NULL_CHUNK):
        rows = min(_NULL_CHUNK, NULL_DRAWS - start)
        estimate, se = _statistic_parts(rng.standard_normal((rows, trials)), g)
        parts.append(np.abs(estimate / se))
    null = np.sort(np.concatenate(parts))
    null.setflags(write=False)
    return null


def _accepted_draws(alpha: float) -> int:
    """The fewest null draws at or beyond |T| for p >= alpha (the p-value's arithmetic)."""
    count = max(0, math.floor(alpha * (NULL_DRAWS + 1)) - 3)
    while count <= NULL_DRAWS and (1 + count) / (NULL_DRAWS + 1) < alpha:
        count += 1
    return count


def trimmed_t_core(differences: FloatArray, alpha: float, trim: float = TRIM) -> TrimmedCore:
    """Yuen's test that the trimmed mean of the last axis is 0, and the interval that
    inverts it (module text). Fewer than 2 trials or non-finite values give NaN; a
    winsorised spread of 0 gives p = 1 for a trimmed mean of 0 and NaN otherwise.
    """
    d = np.asarray(differences, dtype=np.float64)
    m = d.shape[-1]
    shape = d.shape[:-1]
    nan = np.full(shape, math.nan)
    g = trimmed_count(m, trim)
    if m < 2:
        return TrimmedCore(nan, nan, g, nan, (nan, nan))
    with np.errstate(invalid="ignore", divide="ignore"):
        estimate, se = _statistic_parts(d, g)
    finite = np.all(np.isfinite(d), axis=-1)
    estimate = np.where(finite, estimate, math.nan)
    if g == 0:
        p, lo, hi = t_decision(estimate, se, float(m - 1), alpha)
        return TrimmedCore(estimate, se, g, p, (lo, hi))
    null = _null_abs_statistic(m, g)
    with np.errstate(invalid="ignore", divide="ignore"):
        statistic = np.abs(estimate) / se
    beyond = NULL_DRAWS - np.searchsorted(null, statistic, side="left")
    p = (1.0 + beyond) / (NULL_DRAWS + 1)
    accepted = _accepted_draws(alpha)
    q = math.inf if accepted == 0 else float(null[NULL_DRAWS - accepted])
    half = q * se
    zero_spread = se == 0.0
    p = np.where(zero_spread, np.where(estimate == 0.0, 1.0, math.nan), p)
    half = np.where(zero_spread & (estimate == 0.0), 0.0, half)
    p = np.where(np.isnan(estimate), math.nan, p)
    lo, hi = agree_with_p(estimate - half, estimate + half, p, alpha)
    return TrimmedCore(estimate, se, g, p, (lo, hi))


def trimmed_t_test(
    sample: MetricSample,
    *,
    alpha: float = 0.05,
    preprocessing: Preprocessing = "none",
    percentile: float = DEFAULT_OUTLIER_PERCENTILE,
    trim: float = TRIM,
) -> Comparison:
    """Compare B with A by Yuen's trimmed-mean test on per-trial differences of
    (preprocessed) means. The model is named ``trimmed-t-<preprocessing>``.

    The sample needs a trial column and both arms in every trial. Fewer than two trials, or
    differences without winsorised spread (all equal but not all 0), give NaN and a
    warning.
    """
    validate_test_arguments(alpha, preprocessing)
    if not 0.0 <= trim < 0.5:
        raise ValueError(f"trim must be in [0, 0.5), got {trim!r}; 0.2 is the usual choice")
    sample.require("trial")
    model = f"trimmed-t-{preprocessing}"
    pre = preprocess(sample, preprocessing, percentile=percentile)
    _, means_a, means_b = per_trial_means(pre.sample)
    trials = len(means_a)
    if trials < 2:
        message = warn_degenerate(f"{model} needs at least 2 trials, got {trials}")
        return nan_comparison(model, sample, alpha=alpha, message=message)
    # Relative differences need every trial's baseline on one side of 0.
    relative = bool(np.all(means_a > 0) or np.all(means_a < 0))
    differences = means_b / means_a - 1.0 if relative else means_b - means_a
    core = trimmed_t_core(differences, alpha, trim)
    p_value = float(core.p_value)
    estimate = float(core.estimate)
    if math.isnan(p_value):
        message = warn_degenerate(
            f"{model}: the trials' differences have no spread once the outer "
            f"{core.trimmed} at each end are winsorised (trimmed mean {estimate:g}); the "
            f"statistic is undefined"
        )
        return nan_comparison(model, sample, alpha=alpha, message=message)
    details = {
        "trials": float(trials),
        "trimmed": float(core.trimmed),
        "trimmed_mean": estimate,
        "se": float(core.se),
        "relative": float(relative),
        "rows_changed": float(pre.n_changed),
    }
    location_a = float(np.mean(means_a))
    n_a = int(np.count_nonzero(pre.sample.arm == ARM_A))
    n_b = int(np.count_nonzero(pre.sample.arm == ARM_B))
    interval = (float(core.ci[0]), float(core.ci[1]))
    if relative:
        return comparison_from_relative(
            model=model,
            location_a=location_a,
            relative=estimate,
            relative_ci=interval,
            power=pre.power,
            p_value=p_value,
            alpha=alpha,
            n_a=n_a,
            n_b=n_b,
            details=details,
        )
    return comparison_from_shift(
        model=model,
        location_a=location_a,
        shift=estimate,
        shift_ci=interval,
        power=pre.power,
        p_value=p_value,
        alpha=alpha,
        n_a=n_a,
        n_b=n_b,
        details=details,
    )
