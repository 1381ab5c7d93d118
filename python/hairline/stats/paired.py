"""The paired t-test on per-trial differences of means: the multi-trial model for few trials.

Like the permutation test (:mod:`hairline.stats.permutation`) it uses only the vector M of
per-trial differences, M_i = mean(B rows of trial i) - mean(A rows of trial i), so noise the
arms of a trial share cancels and rows within a trial are never taken as independent. It
differs in how it gets a p-value: t = mean(M) / (sd(M) / sqrt(m)) against Student's t with
m - 1 degrees of freedom, instead of enumerating sign vectors.

Why it exists: the exact sign-flip test cannot give a p-value below 2/2^m, so with fewer than
6 trials it can never reach alpha = 0.05 (two-sided), however large the change. Pooling the
rows of a few trials in a Welch test instead treats trial-to-trial noise as if it averaged
out over requests, which is what makes pooled tests' false-positive rates grow with the
number of rows (see the tests). The paired t-test is exact when the M_i are normal, and each
M_i is a difference of means over hundreds or thousands of requests, so by the central limit
theorem they are close to it; the A/A simulations in the tests check the rate with skewed
per-request values and 2 to 6 trials. It is the fallback for 2 to 4 trials; from 5 the
trimmed t-test (:mod:`hairline.stats.trimmed`) takes over, which one bad trial cannot
overturn.

The interval inverts the same test: mean(M) ± t_{1-alpha/2}(m - 1)·sd(M)/sqrt(m), divided by
the mean of A's trial means for the relative scale, so it excludes 0 exactly when p < alpha.
:func:`paired_t_core` is that computation on arrays of differences (any leading shape), which
the planning and sequential simulations call so that they judge exactly what the model does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hairline.stats._modelkit import (
    FloatArray,
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

__all__ = ["PairedCore", "paired_t_core", "paired_t_test"]


@dataclass(frozen=True)
class PairedCore:
    """The paired t-test on the last axis of an array of per-trial differences."""

    mean: FloatArray
    se: FloatArray
    df: int
    p_value: FloatArray
    ci: tuple[FloatArray, FloatArray]


def paired_t_core(differences: FloatArray, alpha: float) -> PairedCore:
    """Paired t-test of mean 0 on the last axis (one value per trial), with the interval
    that inverts it. Differences that are all equal give p = 1 when they are 0, NaN
    otherwise; fewer than 2 trials give NaN.
    """
    d = np.asarray(differences, dtype=np.float64)
    m = d.shape[-1]
    if m < 2:
        nan = np.full(d.shape[:-1], math.nan)
        return PairedCore(nan, nan, m - 1, nan, (nan, nan))
    mean = np.mean(d, axis=-1)
    se = np.std(d, axis=-1, ddof=1) / math.sqrt(m)
    p, lo, hi = t_decision(mean, se, float(m - 1), alpha)
    return PairedCore(mean, se, m - 1, p, (lo, hi))


def paired_t_test(
    sample: MetricSample,
    *,
    alpha: float = 0.05,
    preprocessing: Preprocessing = "none",
    percentile: float = DEFAULT_OUTLIER_PERCENTILE,
) -> Comparison:
    """Compare B with A by a paired t-test on per-trial differences of (preprocessed) means.

    The model is named ``paired-t-<preprocessing>``. The sample needs a trial column and both
    arms in every trial. Fewer than two trials, or per-trial differences that are all equal
    (no spread to judge them by), give NaN and a warning; all-zero differences are p = 1.
    """
    validate_test_arguments(alpha, preprocessing)
    sample.require("trial")
    model = f"paired-t-{preprocessing}"
    pre = preprocess(sample, preprocessing, percentile=percentile)
    _, means_a, means_b = per_trial_means(pre.sample)
    trials = len(means_a)
    if trials < 2:
        message = warn_degenerate(f"{model} needs at least 2 trials, got {trials}")
        return nan_comparison(model, sample, alpha=alpha, message=message)
    differences = means_b - means_a
    mean_difference = float(np.mean(differences))
    core = paired_t_core(differences, alpha)
    p_value = float(core.p_value)
    if math.isnan(p_value):
        message = warn_degenerate(
            f"{model}: every trial differs by exactly {mean_difference:g}; with no spread "
            f"between trials the t statistic is undefined"
        )
        return nan_comparison(model, sample, alpha=alpha, message=message)
    se = float(core.se)
    t_stat = mean_difference / se if se > 0.0 else 0.0
    return comparison_from_shift(
        model=model,
        location_a=float(np.mean(means_a)),
        shift=mean_difference,
        shift_ci=(float(core.ci[0]), float(core.ci[1])),
        power=pre.power,
        p_value=p_value,
        alpha=alpha,
        n_a=int(np.count_nonzero(pre.sample.arm == ARM_A)),
        n_b=int(np.count_nonzero(pre.sample.arm == ARM_B)),
        details={
            "trials": float(trials),
            "mean_difference": mean_difference,
            "t": t_stat,
            "df": float(trials - 1),
            "rows_changed": float(pre.n_changed),
        },
    )
