"""Pieces the ServiceLab models share: the degenerate-data warning and how a comparison made
on a transformed scale is reported in the metric's own units.

Every model reports B relative to A. A model that tests on transformed values (the square
root) still reports ``effect_rel`` and ``ci_rel`` in the original units: it estimates the
ratio of locations on the transformed scale and raises it to the transform's inverse power.
For the square root that is exact when the change scales every observation by the same
factor c (sqrt(c·x) = sqrt(c)·sqrt(x), so the ratio of root means is sqrt(c) and its square
is c), which is the regression model the adaptive selection injects.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from hairline.stats.data import Comparison, MetricSample

__all__ = [
    "DegenerateDataWarning",
    "FloatArray",
    "comparison_from_ratio",
    "nan_comparison",
    "warn_degenerate",
]

FloatArray = NDArray[np.float64]


class DegenerateDataWarning(RuntimeWarning):
    """The data cannot support the requested statistic; the result holds NaN."""


def warn_degenerate(message: str) -> str:
    """Emit ``message`` as a :class:`DegenerateDataWarning` and return it for the result."""
    warnings.warn(message, DegenerateDataWarning, stacklevel=3)
    return message


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


def comparison_from_ratio(
    *,
    model: str,
    location_a: float,
    location_b: float,
    ratio_ci: tuple[float, float],
    power: float,
    p_value: float,
    alpha: float,
    n_a: int,
    n_b: int,
    warnings: Sequence[str] = (),
    details: dict[str, float] | None = None,
) -> Comparison:
    """Report a comparison made on a transformed scale in the metric's units.

    ``location_a``/``location_b`` are the arms' locations on the transformed scale and
    ``ratio_ci`` the interval of location_b / location_a there. ``power`` undoes the
    transform (2 for the square root, 1 for none): the reported means are location**power
    and ratios are raised to ``power``, which keeps the interval's order and whether it
    holds 1 (so the interval and the p-value agree on the same scale).
    """
    mean_a = location_a**power
    mean_b = location_b**power
    lo, hi = ratio_ci
    # A ratio below 0 has no power back-map; it only arises from a huge delta-method interval
    # around a tiny mean, where clipping to 0 (B at least 100% better) is the honest bound.
    ci_rel = (max(lo, 0.0) ** power - 1.0, max(hi, 0.0) ** power - 1.0)
    effect_rel = mean_b / mean_a - 1.0 if mean_a != 0.0 else math.nan
    return Comparison(
        model=model,
        mean_a=mean_a,
        mean_b=mean_b,
        effect_abs=mean_b - mean_a,
        effect_rel=effect_rel,
        ci_abs=(ci_rel[0] * mean_a, ci_rel[1] * mean_a),
        ci_rel=ci_rel,
        p_value=p_value,
        alpha=alpha,
        n_a=n_a,
        n_b=n_b,
        warnings=tuple(warnings),
        details=dict(details or {}),
    )
