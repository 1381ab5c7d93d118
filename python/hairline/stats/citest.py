"""ServiceLab's confidence-interval test (servicelab-osdi24 section 4.2).

Instead of inferring the data's distribution from one experiment, the test takes it from
history: A/A runs of the same service and metric give the distribution of
mean(A') - mean(A), and an experiment is significant when mean(B) - mean(A) falls outside
the interval that holds (1 - alpha) of it. hairline works with relative differences,
mean(A')/mean(A) - 1, so that runs made at different load levels or on different hardware
combine into one distribution.

Two ways to get the interval from n historical runs:

- ``empirical``: a rank p-value (two-sided, min(1, 2·min((1 + #{h <= d}), (1 + #{h >= d}))/
  (n + 1))) and the band of order statistics [h_(k), h_(n-k+1)] it accepts, k the fewest
  runs on each side that keep p >= alpha (about the alpha/2 and 1 - alpha/2 quantiles).
  Distribution-free, which is why the paper uses history at all, but it needs many runs to
  resolve small alphas.
- ``normal``: a prediction interval for one new run, mean ± t(n-1)·sd·sqrt(1 + 1/n), and the
  matching t p-value. Exact for normal run-to-run differences, usable with few runs.

``auto`` (default) is empirical with at least 4/alpha runs (80 at alpha 0.05: under a
week of ServiceLab's two-hourly A/A runs) and normal below that.

The interval for the effect inverts the test: every shift δ for which d - δ lies inside the
history band, i.e. [d - upper, d - lower]. It holds 0 exactly when the test does not reject
(for ``empirical`` because the band is the rank test's acceptance region, not interpolated
quantiles, which would disagree with the rank p-value between two order statistics).
``effect_rel`` is the plain observed d; the history's centre is in ``details``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from hairline.stats import dist
from hairline.stats._modelkit import (
    FloatArray,
    comparison_from_relative,
    nan_comparison,
    rank_band,
    rank_p_value,
    t_decision,
    warn_degenerate,
)
from hairline.stats.data import ARM_A, ARM_B, Comparison, MetricSample

__all__ = [
    "MIN_HISTORY_RUNS",
    "CIThreshold",
    "aa_differences",
    "ci_test",
    "ci_threshold",
]

CIMethod = Literal["auto", "empirical", "normal"]
MIN_HISTORY_RUNS = 3


@dataclass(frozen=True)
class CIThreshold:
    """The interval of A/A relative differences that holds (1 - alpha) of them."""

    lower: float
    upper: float
    center: float
    method: Literal["empirical", "normal"]
    n_runs: int


def _relative_difference(sample: MetricSample, index: int) -> float:
    a = sample.arm_values(ARM_A)
    b = sample.arm_values(ARM_B)
    if len(a) == 0 or len(b) == 0:
        raise ValueError(
            f"history run {index} lacks an arm (A has {len(a)} rows, A' has {len(b)}); "
            f"each A/A run needs rows for arm 0 and arm 1"
        )
    mean_a = float(np.mean(a))
    if mean_a == 0.0:
        raise ValueError(f"history run {index} has a baseline mean of 0: no relative difference")
    return float(np.mean(b)) / mean_a - 1.0


def aa_differences(history: Sequence[MetricSample | float]) -> FloatArray:
    """Relative differences mean(A')/mean(A) - 1, one per historical A/A run.

    Items may be samples (arm 0 = A, arm 1 = A') or differences computed already.
    """
    values = [
        _relative_difference(item, i) if isinstance(item, MetricSample) else float(item)
        for i, item in enumerate(history)
    ]
    out = np.asarray(values, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(out))
    if len(bad):
        raise ValueError(f"history run {int(bad[0])} has a non-finite difference {out[bad[0]]}")
    return out


def _validate_ci_threshold(differences: FloatArray, alpha: float, method: str) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if method not in ("auto", "empirical", "normal"):
        raise ValueError(f"unknown method {method!r}; choose auto, empirical or normal")
    if differences.ndim != 1:
        raise ValueError("differences must be one-dimensional, one per A/A run")


def _resolve(method: CIMethod, n_runs: int, alpha: float) -> Literal["empirical", "normal"]:
    if method == "auto":
        return "empirical" if n_runs >= 4.0 / alpha else "normal"
    return method


def ci_threshold(
    differences: FloatArray, *, alpha: float = 0.05, method: CIMethod = "auto"
) -> CIThreshold:
    """The (1 - alpha) interval of A/A relative differences (see the module text)."""
    h = np.asarray(differences, dtype=np.float64)
    _validate_ci_threshold(h, alpha, method)
    chosen = _resolve(method, len(h), alpha)
    if len(h) < MIN_HISTORY_RUNS:
        warn_degenerate(f"the ci-test needs at least {MIN_HISTORY_RUNS} A/A runs, got {len(h)}")
        return CIThreshold(math.nan, math.nan, math.nan, chosen, len(h))
    center = float(np.mean(h))
    if chosen == "empirical":
        lower, upper = rank_band(h, alpha)
        return CIThreshold(lower, upper, center, chosen, len(h))
    spread = float(np.std(h, ddof=1)) * math.sqrt(1.0 + 1.0 / len(h))
    half = float(dist.t_ppf(1.0 - alpha / 2.0, len(h) - 1)) * spread
    return CIThreshold(center - half, center + half, center, chosen, len(h))


def _decision(
    observed: float, h: FloatArray, threshold: CIThreshold, alpha: float
) -> tuple[float, tuple[float, float]]:
    """The p-value of ``observed`` against the history and the interval for the effect that
    inverts the same test: every δ for which observed - δ lies in the history band."""
    n = len(h)
    if threshold.method == "empirical":
        below = int(np.count_nonzero(h <= observed))
        p = rank_p_value(below, int(np.count_nonzero(h >= observed)), n)
        return p, (observed - threshold.upper, observed - threshold.lower)
    shifted = observed - threshold.center
    spread = float(np.std(h, ddof=1)) * math.sqrt(1.0 + 1.0 / n)
    if spread == 0.0:
        # Every A/A run agreed exactly: any other difference is beyond the history.
        return (1.0 if shifted == 0.0 else 0.0), (shifted, shifted)
    p_t, lo, hi = t_decision(shifted, spread, float(n - 1), alpha)
    return float(p_t), (float(lo), float(hi))


def _validate_ci_test(
    sample: MetricSample, history: Sequence[MetricSample | float] | None
) -> Sequence[MetricSample | float]:
    if history is None or len(history) == 0:
        raise ValueError(
            "the ci-test needs history: A/A runs of the same service and metric "
            "(pass history=[...] or --history AA_OBSERVATIONS), or choose another model"
        )
    return history


def ci_test(
    sample: MetricSample,
    history: Sequence[MetricSample | float] | None,
    *,
    alpha: float = 0.05,
    method: CIMethod = "auto",
) -> Comparison:
    """Compare B with A against the spread of historical A/A runs (the model ``ci-test``).

    ``history`` holds A/A runs as samples or as relative differences. Without history this
    is a ``ValueError``; with fewer than 3 runs, or an arm without rows, the result is NaN
    with a warning.
    """
    runs = _validate_ci_test(sample, history)
    h = aa_differences(runs)
    _validate_ci_threshold(h, alpha, method)
    model = "ci-test"
    a = sample.arm_values(ARM_A)
    b = sample.arm_values(ARM_B)
    if len(a) == 0 or len(b) == 0 or float(np.mean(a)) == 0.0:
        message = warn_degenerate(
            f"{model} needs rows in both arms and a non-zero baseline mean "
            f"(A has {len(a)} rows, B has {len(b)})"
        )
        return nan_comparison(model, sample, alpha=alpha, message=message)
    threshold = ci_threshold(h, alpha=alpha, method=method)
    if math.isnan(threshold.lower):
        message = f"{model} needs at least {MIN_HISTORY_RUNS} A/A runs, got {len(h)}"
        return nan_comparison(model, sample, alpha=alpha, message=message)
    mean_a, mean_b = float(np.mean(a)), float(np.mean(b))
    observed = mean_b / mean_a - 1.0
    p_value, interval = _decision(observed, h, threshold, alpha)
    return comparison_from_relative(
        model=model,
        location_a=mean_a,
        relative=observed,
        relative_ci=interval,
        power=1.0,
        p_value=p_value,
        alpha=alpha,
        n_a=len(a),
        n_b=len(b),
        details={
            "history_runs": float(threshold.n_runs),
            "history_center": threshold.center,
            "history_lower": threshold.lower,
            "history_upper": threshold.upper,
            "empirical": float(threshold.method == "empirical"),
        },
    )
