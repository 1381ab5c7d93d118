"""ServiceLab's permutation test on the vector M of per-trial differences of means
(servicelab-osdi24 section 4.2).

For each trial, M_i = mean(B rows of trial i) - mean(A rows of trial i). Under H0: μ_Δ = 0 the
arms of a trial are exchangeable, so each M_i is as likely to carry either sign; the null
distribution of mean(M) is that of mean(s·M) over sign vectors s ∈ {-1, +1}^m. The two-sided
p-value is the proportion of sign vectors whose |mean| is at least the observed |mean(M)|.
With few trials (2^m <= 2^max_exact_trials) all sign vectors are enumerated and the p-value is
exact; otherwise ``n_resamples`` random sign vectors are drawn and p = (1 + hits)/(1 + n).

Only trial means enter, so noise that both arms of a trial share (the machines' state, the
time of day) cancels, and requests within a trial are never treated as independent.

The p-value is the sign-flip test's on the (preprocessed) trial means. ``ci_rel`` is the HHVM
delta-method interval on the paired trial means (t quantile with m - 1 degrees of freedom),
mapped back to the metric's units like every model (:mod:`hairline.stats._modelkit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hairline.stats._modelkit import (
    FloatArray,
    comparison_from_ratio,
    nan_comparison,
    warn_degenerate,
)
from hairline.stats.data import ARM_A, ARM_B, Comparison, MetricSample
from hairline.stats.preprocess import (
    DEFAULT_OUTLIER_PERCENTILE,
    Preprocessing,
    preprocess,
    validate_test_arguments,
)
from hairline.stats.relative import relative_effect

__all__ = [
    "DEFAULT_MAX_EXACT_TRIALS",
    "SignFlipResult",
    "per_trial_means",
    "permutation_test",
    "sign_flip_test",
]

# 2^16 sign vectors x 16 trials is a 1-million-entry matrix: exact in a few milliseconds.
DEFAULT_MAX_EXACT_TRIALS = 16
_CHUNK_ROWS = 4096
# Relative tolerance when comparing permuted means with the observed one, so that the
# identity permutation (and exact ties) count as "as extreme" despite rounding.
_TIE_TOLERANCE = 100 * np.finfo(np.float64).eps


@dataclass(frozen=True)
class SignFlipResult:
    """The sign-flip test of H0: mean(M) = 0."""

    statistic: float
    p_value: float
    n_permutations: int
    exact: bool


def _validate_sign_flip(m: FloatArray, n_resamples: int, max_exact_trials: int) -> None:
    if m.ndim != 1:
        raise ValueError("differences must be a one-dimensional array (one value per trial)")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if not 0 <= max_exact_trials <= 24:
        raise ValueError(
            f"max_exact_trials must be in [0, 24] (2^24 sign vectors), got {max_exact_trials}"
        )


def sign_flip_test(
    differences: FloatArray,
    *,
    rng: np.random.Generator,
    n_resamples: int = 9999,
    max_exact_trials: int = DEFAULT_MAX_EXACT_TRIALS,
) -> SignFlipResult:
    """Two-sided sign-flip permutation test that the mean of ``differences`` is 0.

    Exact (every sign vector) when ``len(differences) <= max_exact_trials``, Monte Carlo with
    ``n_resamples`` draws from ``rng`` otherwise. An empty input gives NaN and a warning.
    """
    m = np.asarray(differences, dtype=np.float64)
    _validate_sign_flip(m, n_resamples, max_exact_trials)
    count = len(m)
    if count == 0 or not np.all(np.isfinite(m)):
        warn_degenerate("the sign-flip test needs at least one finite per-trial difference")
        return SignFlipResult(math.nan, math.nan, 0, False)
    observed = float(np.mean(m))
    threshold = abs(observed) * (1.0 - _TIE_TOLERANCE)
    if count <= max_exact_trials:
        codes = np.arange(2**count, dtype=np.int64)
        hits = 0
        for start in range(0, len(codes), _CHUNK_ROWS):
            bits = (codes[start : start + _CHUNK_ROWS, None] >> np.arange(count)) & 1
            means = ((2.0 * bits - 1.0) @ m) / count
            hits += int(np.count_nonzero(np.abs(means) >= threshold))
        return SignFlipResult(observed, hits / 2**count, 2**count, True)
    hits = 0
    done = 0
    while done < n_resamples:
        rows = min(_CHUNK_ROWS, n_resamples - done)
        signs = rng.integers(0, 2, size=(rows, count)) * 2.0 - 1.0
        hits += int(np.count_nonzero(np.abs(signs @ m / count) >= threshold))
        done += rows
    return SignFlipResult(observed, (1 + hits) / (1 + n_resamples), n_resamples, False)


def per_trial_means(sample: MetricSample) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Trial codes and each trial's A and B means, trials in ascending code order.

    A trial missing an arm is a ``ValueError`` naming it: its difference is undefined.
    """
    sample.require("trial")
    trial = sample.trial
    assert trial is not None  # checked by require() just above
    keys, inverse = np.unique(trial, return_inverse=True)
    means: list[FloatArray] = []
    for arm in (ARM_A, ARM_B):
        mask = sample.arm == arm
        sums = np.bincount(inverse[mask], weights=sample.value[mask], minlength=len(keys))
        counts = np.bincount(inverse[mask], minlength=len(keys))
        missing = np.flatnonzero(counts == 0)
        if len(missing):
            raise ValueError(
                f"trial {int(keys[missing[0]])} has no rows of arm {'AB'[arm]}; every trial "
                f"of a permutation model needs both arms (drop the trial or use a t-test)"
            )
        means.append(sums / counts)
    return keys.astype(np.float64), means[0], means[1]


def _validate_permutation_test(sample: MetricSample, alpha: float, preprocessing: str) -> None:
    validate_test_arguments(alpha, preprocessing)
    sample.require("trial")


def permutation_test(
    sample: MetricSample,
    *,
    rng: np.random.Generator,
    alpha: float = 0.05,
    preprocessing: Preprocessing = "none",
    percentile: float = DEFAULT_OUTLIER_PERCENTILE,
    n_resamples: int = 9999,
    max_exact_trials: int = DEFAULT_MAX_EXACT_TRIALS,
) -> Comparison:
    """Compare B with A by the sign-flip test on per-trial differences of (preprocessed) means.

    The model is named ``permutation-<preprocessing>``. The sample needs a trial column and
    both arms in every trial. Fewer than two trials give NaN and a warning; too few trials
    for the smallest attainable p-value (2/2^m) to reach ``alpha`` give a warning.
    """
    _validate_permutation_test(sample, alpha, preprocessing)
    model = f"permutation-{preprocessing}"
    pre = preprocess(sample, preprocessing, percentile=percentile)
    _, means_a, means_b = per_trial_means(pre.sample)
    trials = len(means_a)
    if trials < 2:
        message = warn_degenerate(f"{model} needs at least 2 trials, got {trials}")
        return nan_comparison(model, sample, alpha=alpha, message=message)
    notes: list[str] = []
    if trials <= max_exact_trials and 2.0 / 2**trials > alpha:
        needed = math.ceil(1.0 - math.log2(alpha))
        notes.append(
            f"with {trials} trials the smallest p-value the sign-flip test can give is "
            f"{2.0 / 2**trials:.3g} > alpha {alpha}: it cannot flag a change; run at least "
            f"{needed} trials"
        )
    flip = sign_flip_test(
        means_b - means_a, rng=rng, n_resamples=n_resamples, max_exact_trials=max_exact_trials
    )
    rel = relative_effect(means_a, means_b, alpha=alpha, paired=True)
    notes.extend(rel.warnings)
    return comparison_from_ratio(
        model=model,
        location_a=rel.mean_a,
        location_b=rel.mean_b,
        ratio_ci=(1.0 + rel.ci_rel[0], 1.0 + rel.ci_rel[1]),
        power=pre.power,
        p_value=flip.p_value,
        alpha=alpha,
        n_a=int(np.count_nonzero(pre.sample.arm == ARM_A)),
        n_b=int(np.count_nonzero(pre.sample.arm == ARM_B)),
        warnings=notes,
        details={
            "trials": float(trials),
            "mean_difference": flip.statistic,
            "permutations": float(flip.n_permutations),
            "exact": float(flip.exact),
            "rows_changed": float(pre.n_changed),
        },
    )
