"""ServiceLab's permutation test on the vector M of per-trial differences of means
(servicelab-osdi24 section 4.2), with the interval that inverts it.

For each trial, M_i = mean(B rows of trial i) - mean(A rows of trial i). Under H0: μ_Δ = 0 the
arms of a trial are exchangeable, so each M_i is as likely to carry either sign; the null
distribution of mean(M) is that of mean(s·M) over sign vectors s ∈ {-1, +1}^m. The two-sided
p-value is the proportion of sign vectors whose |mean| is at least the observed |mean(M)|.
With few trials (2^m <= 2^max_exact_trials) all sign vectors are enumerated and the p-value is
exact; otherwise ``n_resamples`` random sign vectors are drawn and p = (1 + hits)/(1 + n).

Only trial means enter, so noise that both arms of a trial share (the machines' state, the
time of day) cancels, and requests within a trial are never treated as independent.

**The interval is the test inverted.** The (1 - alpha) interval for the shift δ is every δ
for which the same sign-flip test on M - δ gives p >= alpha. Write μ = mean(M) and, for a
sign vector s, k_s = Σ s_i and c_s = Σ s_i M_i - k_s μ. The vector s counts as "as extreme"
for the shift μ + u exactly when |c_s - k_s u| >= m |u|; for |k_s| < m the left side grows
slower than the right as |u| grows, so s counts on a closed interval [μ - v_s, μ + u_s] with

    u_s = max(c_s / (m + k_s), -c_s / (m - k_s)),   v_s = max(c_s / (m - k_s), -c_s / (m + k_s)),

and the two constant vectors (k_s = ±m) count for every δ. The p-value at δ is therefore a
count of u_s (or v_s) at least the distance |δ - μ|, monotone in that distance on each side,
and the interval's ends are order statistics of u and v: the acceptance region is an
interval, computed exactly, and it holds 0 exactly when p >= alpha (the p-value at 0 is
counted from the same u and v). When the test cannot reach alpha at all (2/2^m > alpha) the
interval is the whole line, which says what the test can say. Divided by the mean of A's
trial means, it is the relative interval (:mod:`hairline.stats._modelkit`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from hairline.stats._modelkit import (
    FloatArray,
    comparison_from_shift,
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
    """The sign-flip test of H0: mean(M) = 0 and the (1 - alpha) interval for mean(M) that
    inverts it (ends may be infinite: the test cannot reject any shift there)."""

    statistic: float
    p_value: float
    n_permutations: int
    exact: bool
    ci: tuple[float, float] = (math.nan, math.nan)


def _validate_sign_flip(m: FloatArray, n_resamples: int, max_exact_trials: int) -> None:
    if m.ndim != 1:
        raise ValueError("differences must be a one-dimensional array (one value per trial)")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if not 0 <= max_exact_trials <= 24:
        raise ValueError(
            f"max_exact_trials must be in [0, 24] (2^24 sign vectors), got {max_exact_trials}"
        )


def _sign_chunks(
    count: int, exact: bool, n_resamples: int, rng: np.random.Generator
) -> Iterator[FloatArray]:
    """Sign vectors in chunks: all 2^count of them, or ``n_resamples`` drawn."""
    if exact:
        total = 2**count
        for start in range(0, total, _CHUNK_ROWS):
            codes = np.arange(start, min(start + _CHUNK_ROWS, total), dtype=np.int64)
            yield (((codes[:, None] >> np.arange(count)) & 1) * 2.0 - 1.0).astype(np.float64)
        return
    done = 0
    while done < n_resamples:
        rows = min(_CHUNK_ROWS, n_resamples - done)
        yield (rng.integers(0, 2, size=(rows, count)) * 2.0 - 1.0).astype(np.float64)
        done += rows


class _Largest:
    """The ``keep`` largest values seen so far, kept across chunks."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.values = np.empty(0)

    def add(self, chunk: FloatArray) -> None:
        if self.keep <= 0:
            return
        merged = np.concatenate([self.values, chunk])
        if len(merged) > self.keep:
            merged = np.partition(merged, len(merged) - self.keep)[len(merged) - self.keep :]
        self.values = merged

    def kth(self, k: int) -> float:
        """The k-th largest value (k <= keep); +inf for k <= 0, where every distance is
        accepted, and 0 when fewer than k values were seen."""
        if k <= 0:
            return math.inf
        if len(self.values) < k:
            return 0.0
        return float(np.partition(self.values, len(self.values) - k)[len(self.values) - k])


def _needed(total: int, alpha: float, exact: bool) -> int:
    """The fewest sign vectors counted "as extreme" for p >= alpha, by the same float
    arithmetic as the p-value (so the interval and the p-value agree to the last bit)."""

    def p_of(hits: int) -> float:
        return hits / total if exact else (1 + hits) / (1 + total)

    hits = max(0, math.floor(alpha * total) - 2)
    while hits <= total and p_of(hits) < alpha:
        hits += 1
    return hits


def sign_flip_test(
    differences: FloatArray,
    *,
    rng: np.random.Generator,
    n_resamples: int = 9999,
    max_exact_trials: int = DEFAULT_MAX_EXACT_TRIALS,
    alpha: float = 0.05,
) -> SignFlipResult:
    """Two-sided sign-flip permutation test that the mean of ``differences`` is 0, and the
    (1 - ``alpha``) interval for the mean that inverts it (module text).

    Exact (every sign vector) when ``len(differences) <= max_exact_trials``, Monte Carlo with
    ``n_resamples`` draws from ``rng`` otherwise (the interval then inverts the test on the
    same draws). An empty input gives NaN and a warning.
    """
    m = np.asarray(differences, dtype=np.float64)
    _validate_sign_flip(m, n_resamples, max_exact_trials)
    count = len(m)
    if count == 0 or not np.all(np.isfinite(m)):
        warn_degenerate("the sign-flip test needs at least one finite per-trial difference")
        return SignFlipResult(math.nan, math.nan, 0, False)
    exact = count <= max_exact_trials
    total = 2**count if exact else n_resamples
    mu = float(np.mean(m))
    need = _needed(total, alpha, exact)
    # The constant vectors count at every shift; every other one counts while the shift is
    # within v below or u above mu. Rounding is resolved in favour of counting, as exact
    # ties must (a trial whose difference is 0 flips to itself).
    always = 0
    hits_at_zero = 0
    below, above = _Largest(need), _Largest(need)
    for signs in _sign_chunks(count, exact, n_resamples, rng):
        k = signs.sum(axis=1)
        constant = np.abs(k) == count
        always += int(np.count_nonzero(constant))
        k, signs = k[~constant], signs[~constant]
        c = signs @ m - k * mu
        up = np.maximum(c / (count + k), -c / (count - k)) * (1.0 + _TIE_TOLERANCE)
        down = np.maximum(c / (count - k), -c / (count + k)) * (1.0 + _TIE_TOLERANCE)
        hits_at_zero += int(np.count_nonzero((down if mu >= 0.0 else up) >= abs(mu)))
        below.add(down)
        above.add(up)
    hits = always + hits_at_zero
    p = hits / total if exact else (1 + hits) / (1 + total)
    ci = (mu - below.kth(need - always), mu + above.kth(need - always))
    return SignFlipResult(mu, p, total, exact, ci)


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
        means_b - means_a,
        rng=rng,
        n_resamples=n_resamples,
        max_exact_trials=max_exact_trials,
        alpha=alpha,
    )
    return comparison_from_shift(
        model=model,
        location_a=float(np.mean(means_a)),
        shift=flip.statistic,
        shift_ci=flip.ci,
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
