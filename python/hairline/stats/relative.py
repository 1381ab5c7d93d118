"""The relative effect (B - A)/A with its delta-method variance, and the 355·S² sample-size
rule (hhvm-autotuning-icpe23 section 5.1).

The paper estimates Δ = (p̄_test - p̄_ctrl)/p̄_ctrl and its variance by the delta method:

    var(p̄_test/p̄_ctrl) = var(p̄_test)/p̄_ctrl² + p̄_test²·var(p̄_ctrl)/p̄_ctrl⁴

with var(p̄) the variance of a mean, var(p)/n. Its printed interval Δ̄ ± T·var(Δ) multiplies
the quantile by the variance; the interval is meant on Δ's scale, so hairline multiplies by the
standard error sqrt(var(Δ)), which is what the delta method's normal approximation gives.

For clustered data (many requests per trial or per host) the requests are not independent,
so the delta method is applied to per-cluster means, one value per trial or host and arm.
When every trial has both arms the per-trial means are paired and the covariance term
-2·p̄_test·cov(p̄_test, p̄_ctrl)/p̄_ctrl³ enters: noise that both arms of a trial share
cancels from the ratio.

The 355·S² rule (Kohavi et al., cited by the paper) asks for at least 355·S² samples per arm
before trusting the normal approximation, S being the skewness E[(X - EX)³]/Var(X)^{3/2}.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from hairline.stats import dist
from hairline.stats._modelkit import FloatArray, warn_degenerate
from hairline.stats.data import ARM_A, ARM_B, MetricSample

__all__ = [
    "SKEWNESS_RULE_FACTOR",
    "RelativeEffect",
    "SampleSizeCheck",
    "check_sample_size",
    "cluster_means",
    "relative_effect",
    "relative_effect_clustered",
    "sample_size_warnings",
]

SKEWNESS_RULE_FACTOR = 355.0


@dataclass(frozen=True)
class RelativeEffect:
    """Δ = mean_b/mean_a - 1 with its delta-method standard error and (1 - alpha) interval."""

    effect_rel: float
    se: float
    ci_rel: tuple[float, float]
    df: float
    mean_a: float
    mean_b: float
    n_a: int
    n_b: int
    paired: bool
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class SampleSizeCheck:
    """The 355·S² rule for one set of values: how many are needed, how many there are."""

    skewness: float
    n_required: int
    n: int
    warning: str | None


def _validate_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}; 0.05 is the usual choice")


def _validate_relative_effect(a: FloatArray, b: FloatArray, alpha: float, paired: bool) -> None:
    _validate_alpha(alpha)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError("a and b must be one-dimensional arrays of values")
    if paired and len(a) != len(b):
        raise ValueError(f"paired values need equal lengths, got {len(a)} for A and {len(b)} for B")


def relative_effect(
    a: FloatArray, b: FloatArray, *, alpha: float = 0.05, paired: bool = False
) -> RelativeEffect:
    """The relative effect of B over A with the HHVM paper's delta-method interval.

    Unpaired, the t quantile uses Welch–Satterthwaite degrees of freedom on the two terms of
    the delta-method variance; paired (``a[i]`` and ``b[i]`` from the same trial), n - 1.
    Fewer than two values per arm, a zero baseline mean or non-finite values give NaN and a
    :class:`~hairline.stats._modelkit.DegenerateDataWarning`.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    _validate_relative_effect(a, b, alpha, paired)
    n_a, n_b = len(a), len(b)
    nan = math.nan

    def degenerate(message: str) -> RelativeEffect:
        mean_a = float(np.mean(a)) if n_a else nan
        mean_b = float(np.mean(b)) if n_b else nan
        return RelativeEffect(
            nan, nan, (nan, nan), nan, mean_a, mean_b, n_a, n_b, paired,
            (warn_degenerate(message),),
        )  # fmt: skip

    if n_a < 2 or n_b < 2:
        return degenerate(f"relative effect needs at least 2 values per arm, got {n_a} and {n_b}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return degenerate("relative effect got non-finite values (NaN or inf)")
    mean_a, mean_b = float(np.mean(a)), float(np.mean(b))
    if mean_a == 0.0:
        return degenerate("relative effect is undefined: the baseline mean is 0")
    var_mean_a = float(np.var(a, ddof=1)) / n_a
    var_mean_b = float(np.var(b, ddof=1)) / n_b
    term_b = var_mean_b / mean_a**2
    term_a = mean_b**2 * var_mean_a / mean_a**4
    if paired:
        # The delta-method variance with the covariance term, written as the variance of the
        # linearised per-trial residuals (b_i - R·a_i)/mean_a, R = mean_b/mean_a: the same
        # value, without the cancellation of three nearly equal terms when the arms agree.
        residuals = (b - (mean_b / mean_a) * a) / mean_a
        variance = float(np.var(residuals, ddof=1)) / n_a
        df = float(n_a - 1)
    else:
        variance = term_b + term_a
        denominator = term_a**2 / (n_a - 1) + term_b**2 / (n_b - 1)
        df = variance**2 / denominator if denominator > 0 else float(n_a + n_b - 2)
    se = math.sqrt(max(variance, 0.0))
    effect = mean_b / mean_a - 1.0
    half = float(dist.t_ppf(1.0 - alpha / 2.0, df)) * se
    return RelativeEffect(
        effect, se, (effect - half, effect + half), df, mean_a, mean_b, n_a, n_b, paired
    )


ClusterColumn = Literal["trial", "host", "request", "batch"]


def cluster_means(sample: MetricSample, by: ClusterColumn) -> tuple[FloatArray, FloatArray]:
    """Per-cluster means of each arm, A first, clusters in ascending code order.

    With ``by="trial"`` and every trial holding both arms, position i of both arrays is the
    same trial, so the result can be used paired.
    """
    sample.require(by)
    codes = getattr(sample, by)
    out: list[FloatArray] = []
    for arm in (ARM_A, ARM_B):
        mask = sample.arm == arm
        keys, inverse = np.unique(codes[mask], return_inverse=True)
        sums = np.bincount(inverse, weights=sample.value[mask], minlength=len(keys))
        counts = np.bincount(inverse, minlength=len(keys))
        out.append(sums / counts)
    return out[0], out[1]


def relative_effect_clustered(
    sample: MetricSample, *, by: ClusterColumn = "trial", alpha: float = 0.05
) -> RelativeEffect:
    """The delta-method relative effect on per-cluster means (one value per cluster and arm).

    Trials that hold both arms are paired; otherwise (hosts run one arm each) the cluster
    means of the two arms are compared unpaired.
    """
    _validate_alpha(alpha)
    sample.require(by)
    codes = getattr(sample, by)
    in_a = set(np.unique(codes[sample.arm == ARM_A]).tolist())
    in_b = set(np.unique(codes[sample.arm == ARM_B]).tolist())
    means_a, means_b = cluster_means(sample, by)
    return relative_effect(means_a, means_b, alpha=alpha, paired=in_a == in_b)


def _validate_check_sample_size(values: FloatArray) -> None:
    if values.ndim != 1:
        raise ValueError("check_sample_size takes a one-dimensional array of values")


def check_sample_size(values: FloatArray, *, n: int | None = None) -> SampleSizeCheck:
    """The 355·S² rule: samples needed for the normal approximation, and a warning if short.

    ``n`` is how many independent samples stand behind the interval (default: the number of
    values). The skewness is the paper's population moment ratio. Fewer than 3 values or
    zero variance leave the skewness undefined: NaN, and no warning is raised for it. Nor
    is one raised when the skewness is within two standard errors (2·sqrt(6/n)) of zero.
    """
    values = np.asarray(values, dtype=np.float64)
    _validate_check_sample_size(values)
    count = len(values) if n is None else n
    if len(values) < 3 or float(np.var(values)) == 0.0:
        return SampleSizeCheck(math.nan, 0, count, None)
    skewness = dist.skew(values)
    if not math.isfinite(skewness):
        # scipy returns NaN when the values are equal up to rounding
        return SampleSizeCheck(math.nan, 0, count, None)
    required = math.ceil(SKEWNESS_RULE_FACTOR * skewness**2)
    warning = None
    # The sample skewness of normal data has standard error about sqrt(6/n); a skewness
    # within two of those is noise, and warning on it would cry wolf on symmetric data.
    distinguishable = abs(skewness) > 2.0 * math.sqrt(6.0 / len(values))
    if distinguishable and count < required:
        warning = (
            f"only {count} samples stand behind the interval; the 355·S² rule "
            f"(skewness {skewness:.2f}) asks for {required} before the normal "
            f"approximation holds: add trials or requests, or use a sqrt/outlier model"
        )
    return SampleSizeCheck(skewness, required, count, warning)


def sample_size_warnings(a: FloatArray, b: FloatArray) -> tuple[str, ...]:
    """The 355·S² warnings of both arms, labelled by arm."""
    found = []
    for label, values in (("A", a), ("B", b)):
        check = check_sample_size(values)
        if check.warning is not None:
            found.append(f"arm {label}: {check.warning}")
    return tuple(found)
