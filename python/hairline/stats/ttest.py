"""Student's and Welch's t-test for one trial (servicelab-osdi24 section 4.2; the statistic of
hhvm-autotuning-icpe23 section 5.1), after one of ServiceLab's preprocessings.

The p-value is the t-test's on the preprocessed values, and the interval inverts the same
test: difference of means ± t quantile × the test's standard error, with the test's degrees
of freedom, divided by A's (preprocessed) mean for the relative scale and mapped back to the
metric's units (see :mod:`hairline.stats._modelkit`): for the square root the locations are
squared root means; for the outlier methods they are the capped or trimmed means. So the
interval excludes 0 exactly when p < alpha.

The t-test treats every row as independent. ServiceLab uses it for single-trial experiments;
given several trials it still pools all rows, and says so in a warning, because trial-to-trial
noise then makes its p-values too small. The permutation test is the multi-trial model.
"""

from __future__ import annotations

import math

import numpy as np

from hairline.stats._modelkit import (
    comparison_from_shift,
    nan_comparison,
    t_decision,
    warn_degenerate,
)
from hairline.stats.data import ARM_A, ARM_B, Comparison, MetricSample
from hairline.stats.preprocess import (
    DEFAULT_OUTLIER_PERCENTILE,
    Preprocessing,
    preprocess,
    validate_test_arguments,
)
from hairline.stats.relative import sample_size_warnings

__all__ = ["t_test"]


def _validate_t_test(sample: MetricSample, alpha: float, preprocessing: str) -> None:
    validate_test_arguments(alpha, preprocessing)
    arms = set(np.unique(sample.arm).tolist())
    if not arms <= {ARM_A, ARM_B}:
        raise ValueError(f"arm codes must be 0 (A) and 1 (B), found {sorted(arms)}")


def t_test(
    sample: MetricSample,
    *,
    alpha: float = 0.05,
    equal_var: bool = True,
    preprocessing: Preprocessing = "none",
    percentile: float = DEFAULT_OUTLIER_PERCENTILE,
) -> Comparison:
    """Compare B with A by a two-sided t-test on the (preprocessed) rows.

    ``equal_var=True`` is Student's test (pooled variance, n_a + n_b - 2 degrees of freedom),
    ``False`` is Welch's. The model is named ``t-test-<preprocessing>`` or
    ``welch-<preprocessing>``. Fewer than two rows in an arm, or no variance in either arm,
    give NaN and a warning.
    """
    _validate_t_test(sample, alpha, preprocessing)
    model = f"{'t-test' if equal_var else 'welch'}-{preprocessing}"
    pre = preprocess(sample, preprocessing, percentile=percentile)
    a = pre.sample.arm_values(ARM_A)
    b = pre.sample.arm_values(ARM_B)
    notes: list[str] = []
    if sample.trial is not None and len(np.unique(sample.trial)) > 1:
        notes.append(
            f"the t-test pools {len(np.unique(sample.trial))} trials as if their rows were "
            f"independent; prefer paired-t or permutation models for multi-trial experiments"
        )
    n_a, n_b = len(a), len(b)
    if n_a < 2 or n_b < 2:
        message = warn_degenerate(f"{model} needs at least 2 rows per arm, got {n_a} and {n_b}")
        return nan_comparison(model, sample, alpha=alpha, message=message, extra_warnings=notes)
    var_a, var_b = float(np.var(a, ddof=1)), float(np.var(b, ddof=1))
    if var_a == 0.0 and var_b == 0.0:
        message = warn_degenerate(f"{model}: both arms are constant, the t statistic is undefined")
        return nan_comparison(model, sample, alpha=alpha, message=message, extra_warnings=notes)
    diff = float(np.mean(b) - np.mean(a))
    if equal_var:
        df = float(n_a + n_b - 2)
        pooled = ((n_a - 1) * var_a + (n_b - 1) * var_b) / df
        se = math.sqrt(pooled * (1.0 / n_a + 1.0 / n_b))
    else:
        va, vb = var_a / n_a, var_b / n_b
        se = math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
    t_stat = diff / se
    p_value, lo, hi = (float(v) for v in t_decision(diff, se, df, alpha))
    notes.extend(sample_size_warnings(a, b))
    return comparison_from_shift(
        model=model,
        location_a=float(np.mean(a)),
        shift=diff,
        shift_ci=(lo, hi),
        power=pre.power,
        p_value=p_value,
        alpha=alpha,
        n_a=n_a,
        n_b=n_b,
        warnings=notes,
        details={
            "t": t_stat,
            "df": df,
            "rows_changed": float(pre.n_changed),
            "raw_mean_a": float(np.mean(sample.arm_values(ARM_A))),
            "raw_mean_b": float(np.mean(sample.arm_values(ARM_B))),
        },
    )
