"""The paired t-test on per-trial differences of means: the multi-trial model for few trials.

Like the permutation test (:mod:`hairline.stats.permutation`) it uses only the vector M of
per-trial differences, M_i = mean(B rows of trial i) - mean(A rows of trial i), so noise the
arms of a trial share cancels and rows within a trial are never taken as independent. It
differs in how it gets a p-value: t = mean(M) / (sd(M) / sqrt(m)) against Student's t with
m - 1 degrees of freedom, instead of enumerating sign vectors.

Why it exists: the exact sign-flip test cannot give a p-value below 2/2^m, so with fewer than
7 trials it can never reach alpha = 0.05 (two-sided), however large the change. Pooling the
rows of 2 to 6 trials in a Welch test instead treats trial-to-trial noise as if it averaged
out over requests, which is what makes pooled tests' false-positive rates grow with the
number of rows (see the tests). The paired t-test is exact when the M_i are normal, and each
M_i is a difference of means over hundreds or thousands of requests, so by the central limit
theorem they are close to it; the A/A simulations in the tests check the rate with skewed
per-request values and 2 to 6 trials.

The effect and interval are the HHVM delta-method relative effect on the paired trial means
(t quantile with m - 1 degrees of freedom), the same as the permutation model's.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from hairline.stats._modelkit import comparison_from_ratio, nan_comparison, warn_degenerate
from hairline.stats.data import ARM_A, ARM_B, Comparison, MetricSample
from hairline.stats.permutation import per_trial_means
from hairline.stats.preprocess import (
    DEFAULT_OUTLIER_PERCENTILE,
    Preprocessing,
    preprocess,
    validate_test_arguments,
)
from hairline.stats.relative import relative_effect

__all__ = ["paired_t_test"]


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
    sd = float(np.std(differences, ddof=1))
    df = float(trials - 1)
    if sd == 0.0:
        if mean_difference != 0.0:
            message = warn_degenerate(
                f"{model}: every trial differs by exactly {mean_difference:g}; with no spread "
                f"between trials the t statistic is undefined"
            )
            return nan_comparison(model, sample, alpha=alpha, message=message)
        t_stat, p_value = 0.0, 1.0
    else:
        t_stat = mean_difference / (sd / math.sqrt(trials))
        p_value = float(2.0 * sps.t.sf(abs(t_stat), df))
    rel = relative_effect(means_a, means_b, alpha=alpha, paired=True)
    return comparison_from_ratio(
        model=model,
        location_a=rel.mean_a,
        location_b=rel.mean_b,
        ratio_ci=(1.0 + rel.ci_rel[0], 1.0 + rel.ci_rel[1]),
        power=pre.power,
        p_value=p_value,
        alpha=alpha,
        n_a=int(np.count_nonzero(pre.sample.arm == ARM_A)),
        n_b=int(np.count_nonzero(pre.sample.arm == ARM_B)),
        warnings=rel.warnings,
        details={
            "trials": float(trials),
            "mean_difference": mean_difference,
            "t": t_stat,
            "df": df,
            "rows_changed": float(pre.n_changed),
        },
    )
