"""Pieces the ServiceLab models share: the degenerate-data warning, the rule that keeps a
model's interval and p-value on one distribution, and how a comparison made on a
transformed scale is reported in the metric's own units.

**One distribution for p and interval.** Every model's (1 - alpha) interval is the set of
shifts its own test does not reject at alpha, so "p < alpha" and "the interval excludes
0" are the same statement. A verdict can then never print "regression" beside an interval
that holds 0. For tests whose statistic is a t ratio that is a quantile and a tail
probability of one t distribution; :func:`agree_with_p` settles the last unit of rounding
between the two (ppf and sf are not exact inverses in floating point) in favour of the
p-value, so the relation holds exactly, not just almost always.

**Relative effects.** A model tests a shift of locations on its own scale (means, capped or
trimmed means, means of square roots). The relative effect is that shift divided by the
baseline location, and the interval is divided by the same number: a fixed positive
divisor keeps which side of 0 each end lies on, so the relative interval holds 0 exactly
when the test does not reject. (The HHVM delta method instead widens the interval for the
baseline's own noise, which makes it a different distribution from the test's; with
per-trial differences of a few percent the two differ in the third digit.)

**Units.** A model that tests on transformed values (the square root) reports ``effect_rel``
and ``ci_rel`` in the original units: relative changes are raised to the transform's
inverse power, ``(1 + x)**power - 1``. For the square root that is exact when the change
scales every observation by the same factor c (sqrt(c·x) = sqrt(c)·sqrt(x)), which is the
regression model the adaptive selection injects. The map is computed as
``expm1(power·log1p(x))`` so that it keeps the sign of tiny x (1 + 1e-17 would round to 1).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from hairline.stats import dist
from hairline.stats.data import Comparison, MetricSample

__all__ = [
    "DegenerateDataWarning",
    "FloatArray",
    "agree_with_p",
    "comparison_from_relative",
    "comparison_from_shift",
    "nan_comparison",
    "rank_band",
    "rank_band_count",
    "rank_p_value",
    "t_decision",
    "to_metric_units",
    "warn_degenerate",
]

FloatArray = NDArray[np.float64]

# How far from 0, relative to an interval's larger end, an end may be moved to agree with
# its p-value: far above the 1e-15 of ppf/sf round trips, far below any real disagreement.
_AGREE_RTOL = 1e-9


class DegenerateDataWarning(RuntimeWarning):
    """The data cannot support the requested statistic; the result holds NaN."""


def warn_degenerate(message: str) -> str:
    """Emit ``message`` as a :class:`DegenerateDataWarning` and return it for the result."""
    warnings.warn(message, DegenerateDataWarning, stacklevel=3)
    return message


def agree_with_p(
    lo: FloatArray | float,
    hi: FloatArray | float,
    p: FloatArray | float,
    alpha: float,
) -> tuple[FloatArray, FloatArray]:
    """Settle a disagreement about 0 between an interval and its p-value that is rounding.

    The two come from one distribution; when their floating-point evaluations disagree
    about 0 (|t| within rounding of the quantile, or an end divided or scaled to 0), the
    end that crossed 0 is set to 0 (p >= alpha: the interval must hold 0) or to the
    smallest number on the far side (p < alpha). Only an end within ``_AGREE_RTOL`` of the
    interval's size from 0 is moved: a larger disagreement is a bug, and is left for the
    tests to see. Arrays of any shape; NaN stays NaN.
    """
    lo_a = np.array(lo, dtype=np.float64, copy=True)
    hi_a = np.array(hi, dtype=np.float64, copy=True)
    p_a = np.asarray(p, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        # Only finite ends measure the interval's size, and an infinite end is never near 0.
        scale = np.fmax(
            np.where(np.isfinite(lo_a), np.abs(lo_a), np.nan),
            np.where(np.isfinite(hi_a), np.abs(hi_a), np.nan),
        )
        near_lo = np.isfinite(lo_a) & (np.abs(lo_a) <= _AGREE_RTOL * scale)
        near_hi = np.isfinite(hi_a) & (np.abs(hi_a) <= _AGREE_RTOL * scale)
    holds = (lo_a <= 0.0) & (hi_a >= 0.0)
    widen = (p_a >= alpha) & ~holds
    lo_a = np.where(widen & (lo_a > 0.0) & near_lo, 0.0, lo_a)
    hi_a = np.where(widen & (hi_a < 0.0) & near_hi, 0.0, hi_a)
    narrow = (p_a < alpha) & holds
    tiny = np.nextafter(0.0, 1.0)
    lo_crossed = narrow & near_lo & (hi_a > 0.0)
    hi_crossed = narrow & near_hi & (lo_a < 0.0) & ~lo_crossed
    lo_a = np.where(lo_crossed, tiny, lo_a)
    hi_a = np.where(hi_crossed, -tiny, hi_a)
    return lo_a, hi_a


def rank_p_value(below: int, above: int, n: int) -> float:
    """Two-sided rank p-value of a value among ``n`` reference values: ``below`` of them
    are <= it and ``above`` are >= it. min(1, 2·min(1 + below, 1 + above)/(n + 1))."""
    return min(1.0, 2.0 * ((1 + min(below, above)) / (n + 1)))


def rank_band_count(n: int, alpha: float) -> int:
    """The fewest reference values that must lie on each side of a value for
    :func:`rank_p_value` to reach ``alpha``, by the same float arithmetic.

    The band that inverts the rank test is then [r_(k), r_(n-k+1)] of the sorted reference
    values (1-indexed; the whole line when k = 0): a value lies in it exactly when p >= alpha.
    """
    k = max(0, math.floor(alpha * (n + 1) / 2.0) - 2)
    while k <= n and rank_p_value(k, k, n) < alpha:
        k += 1
    return k


def rank_band(values: FloatArray, alpha: float) -> tuple[float, float]:
    """[r_(k), r_(n-k+1)] of ``values`` for k = :func:`rank_band_count` (see there)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    k = rank_band_count(len(ordered), alpha)
    if k == 0:
        return (-math.inf, math.inf)
    return (float(ordered[k - 1]), float(ordered[len(ordered) - k]))


def t_decision(
    estimate: FloatArray | float,
    se: FloatArray | float,
    df: FloatArray | float,
    alpha: float,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Two-sided p-value of estimate/se against Student's t(df), and the interval that
    inverts the same test: estimate ± t_{1-alpha/2}(df)·se (ends agreed with p).

    se = 0 gives p = 1 and the point interval when the estimate is 0, NaN otherwise (no
    spread to judge a non-zero estimate by). Arrays broadcast.
    """
    est = np.asarray(estimate, dtype=np.float64)
    s = np.asarray(se, dtype=np.float64)
    d = np.asarray(df, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(est) / s
        p = np.asarray(2.0 * dist.t_sf(t, d), dtype=np.float64)
        half = np.asarray(dist.t_ppf(1.0 - alpha / 2.0, d), dtype=np.float64) * s
    zero_spread = s == 0.0
    p = np.where(zero_spread, np.where(est == 0.0, 1.0, np.nan), p)
    half = np.where(zero_spread & (est == 0.0), 0.0, half)
    lo, hi = agree_with_p(est - half, est + half, p, alpha)
    return p, lo, hi


def to_metric_units(x: FloatArray | float, power: float) -> FloatArray:
    """A relative change on the transformed scale as one in the metric's units:
    ``(1 + x)**power - 1``, sign-exact for tiny x. Below -1 (a location ratio under 0,
    possible only for huge intervals around tiny locations) the power back-map has no
    meaning and -1 (B at least 100% better) is the honest bound; with power 1 nothing is
    transformed and x is kept as is.
    """
    values = np.asarray(x, dtype=np.float64)
    if power == 1.0:
        return values
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.expm1(power * np.log1p(np.maximum(values, -1.0))), dtype=np.float64)


def nan_comparison(
    model: str,
    sample: MetricSample,
    *,
    alpha: float,
    message: str,
    extra_warnings: Sequence[str] = (),
) -> Comparison:
    """A comparison of NaNs that carries ``message`` (already warned) and the arm sizes."""
    a = sample.arm_values(0)
    b = sample.arm_values(1)
    nan = math.nan
    return Comparison(
        model=model,
        mean_a=float(np.mean(a)) if len(a) else nan,
        mean_b=float(np.mean(b)) if len(b) else nan,
        effect_abs=nan,
        effect_rel=nan,
        ci_abs=(nan, nan),
        ci_rel=(nan, nan),
        p_value=nan,
        alpha=alpha,
        n_a=len(a),
        n_b=len(b),
        warnings=(*extra_warnings, message),
    )


def comparison_from_relative(
    *,
    model: str,
    location_a: float,
    relative: float,
    relative_ci: tuple[float, float],
    power: float,
    p_value: float,
    alpha: float,
    n_a: int,
    n_b: int,
    warnings: Sequence[str] = (),
    details: dict[str, float] | None = None,
) -> Comparison:
    """Report a comparison whose test judged ``relative`` = location_b/location_a - 1 on the
    transformed scale, with ``relative_ci`` the interval that inverts that test.

    ``power`` undoes the transform (2 for the square root, 1 for none): the reported means
    are location**power and relative changes go through :func:`to_metric_units`, which
    keeps the interval's order and which side of 0 each end is on.
    """
    mean_a = location_a**power
    effect_rel = float(to_metric_units(relative, power))
    rel_lo, rel_hi = to_metric_units(np.asarray(relative_ci, dtype=np.float64), power)
    mean_b = mean_a * (1.0 + effect_rel)
    # The back-map and the scaling keep the sign of each end up to underflow; agree once
    # more on the numbers actually reported.
    ci_rel = _agreed(float(rel_lo), float(rel_hi), p_value, alpha)
    ci_abs = _agreed(*_scaled(ci_rel[0], ci_rel[1], mean_a), p_value, alpha)
    return Comparison(
        model=model,
        mean_a=mean_a,
        mean_b=mean_b,
        # mean_a·effect_rel rather than mean_b - mean_a: the same number, with the sign of
        # an effect too small to survive the subtraction (the interval's side of 0).
        effect_abs=mean_a * effect_rel,
        effect_rel=effect_rel,
        ci_abs=ci_abs,
        ci_rel=ci_rel,
        p_value=p_value,
        alpha=alpha,
        n_a=n_a,
        n_b=n_b,
        warnings=tuple(warnings),
        details=dict(details or {}),
    )


def _agreed(lo: float, hi: float, p: float, alpha: float) -> tuple[float, float]:
    a, b = agree_with_p(lo, hi, p, alpha)
    return float(a), float(b)


def _scaled(lo: float, hi: float, factor: float) -> tuple[float, float]:
    a, b = lo * factor, hi * factor
    return (a, b) if a <= b else (b, a)


def comparison_from_shift(
    *,
    model: str,
    location_a: float,
    shift: float,
    shift_ci: tuple[float, float],
    power: float,
    p_value: float,
    alpha: float,
    n_a: int,
    n_b: int,
    warnings: Sequence[str] = (),
    details: dict[str, float] | None = None,
) -> Comparison:
    """Report a test of the shift location_b - location_a (on the transformed scale) whose
    interval ``shift_ci`` inverts the same test: both are divided by ``location_a``.

    A baseline location of 0 (an error rate of 0 in A) has no relative scale: the relative
    effect and interval are NaN with a warning. Without a transform the shift is already in
    the metric's units, so ``effect_abs`` and ``ci_abs`` are still reported (an absolute
    threshold can judge them); the p-value is kept either way.
    """
    if math.isfinite(location_a) and location_a != 0.0:
        lo, hi = sorted((shift_ci[0] / location_a, shift_ci[1] / location_a))
        return comparison_from_relative(
            model=model,
            location_a=location_a,
            relative=shift / location_a,
            relative_ci=(lo, hi),
            power=power,
            p_value=p_value,
            alpha=alpha,
            n_a=n_a,
            n_b=n_b,
            warnings=warnings,
            details=details,
        )
    message = warn_degenerate(
        f"{model}: the relative effect is undefined: the baseline location is {location_a:g}"
    )
    nan = math.nan
    mean_a = location_a**power
    mean_b = (location_a + shift) ** power
    ci_abs = _agreed(*shift_ci, p_value, alpha) if power == 1.0 else (nan, nan)
    return Comparison(
        model=model,
        mean_a=mean_a,
        mean_b=mean_b,
        effect_abs=mean_b - mean_a,
        effect_rel=nan,
        ci_abs=ci_abs,
        ci_rel=(nan, nan),
        p_value=p_value,
        alpha=alpha,
        n_a=n_a,
        n_b=n_b,
        warnings=(*warnings, message),
        details=dict(details or {}),
    )
