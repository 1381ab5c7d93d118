"""Verdicts for many metrics at once: regression, improvement, no change or inconclusive.

Each metric has a threshold θ >= 0, relative (a fraction of the baseline) or absolute (in the
metric's units), which is the practical-significance bound: the smallest change that
matters. And a direction: ``higher-is-worse`` (CPU, latency, memory) or ``lower-is-worse``
(throughput). Write w for the effect turned so that positive is worse (w = effect for
higher-is-worse, -effect otherwise), [w_lo, w_hi] for its interval, and p for the p-value,
adjusted across metrics when a correction is asked for. The rule, applied in order:

1. **no change** if both arms measured the same constant (an error rate of 0 in each; the
   registered models flag it in ``details["same_constant"]``): the p-value is NaN or 1 and
   no interval exists around a zero baseline, but there is no difference to explain.
   **inconclusive** if otherwise p, w or the interval is NaN (the model could not decide).
2. **regression** if p < alpha, w > 0 and w >= θ: a significant change in the worse
   direction at least as large as the threshold.
3. **improvement** if p < alpha, w < 0 and -w >= θ.
4. **no change** if θ > 0 and the interval lies inside (-θ, θ): whatever changed, it is
   smaller than what matters, in both directions.
5. **no change** if θ = 0 and p >= alpha: with no practical bound the test alone decides.
6. **inconclusive** otherwise: not shown to matter, but the interval reaches past ±θ, so a
   change that matters is not ruled out (more trials would settle it). This includes a
   significant change whose estimate is below θ while its interval reaches beyond θ.

A verdict is **settled** (``Verdict.settled``) when more trials would not change it: rules 2,
3 and 4, and the constant case; the sequential design stops on it
(:mod:`hairline.stats.sequential`). :func:`classify` is rules 2 to 6 on arrays, which
:func:`decide` and the planning and sequential simulations share.

The interval is the model's (1 - alpha) interval, not adjusted; the adjustment touches the
p-values only. Corrections across the metrics of one experiment:

- ``holm`` (family-wise error): sort the m p-values, p_(i)·(m - i + 1), running maximum,
  capped at 1.
- ``bh`` (Benjamini–Hochberg, false-discovery rate): p_(i)·m/i, running minimum from the
  largest down, capped at 1.

NaN p-values are left out of m and stay NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from hairline.stats._modelkit import FloatArray
from hairline.stats.data import Comparison

__all__ = [
    "OUTCOME_LABELS",
    "SETTLED",
    "Correction",
    "Direction",
    "Label",
    "MetricRule",
    "Verdict",
    "adjust_p_values",
    "classify",
    "decide",
    "verdicts",
]

Direction = Literal["higher-is-worse", "lower-is-worse"]
ThresholdKind = Literal["relative", "absolute"]
Label = Literal["regression", "improvement", "no change", "inconclusive"]
Correction = Literal["none", "holm", "bh"]


@dataclass(frozen=True)
class MetricRule:
    """A metric's threshold (θ >= 0, a fraction when relative) and which way is worse."""

    threshold: float = 0.0
    kind: ThresholdKind = "relative"
    direction: Direction = "higher-is-worse"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.threshold) and self.threshold >= 0.0):
            raise ValueError(
                f"threshold must be a finite number >= 0, got {self.threshold!r} "
                f"(relative thresholds are fractions: 1% is 0.01)"
            )
        if self.kind not in ("relative", "absolute"):
            raise ValueError(f"threshold kind must be relative or absolute, got {self.kind!r}")
        if self.direction not in ("higher-is-worse", "lower-is-worse"):
            raise ValueError(
                f"direction must be higher-is-worse or lower-is-worse, got {self.direction!r}"
            )


@dataclass(frozen=True)
class Verdict:
    """One metric's verdict, with what it was decided from."""

    metric: str
    comparison: Comparison
    rule: MetricRule
    p_adjusted: float
    label: Label
    reason: str
    #: Whether more trials would not change it: a regression, an improvement, or no change
    #: because the interval lies within the threshold (or both arms are the same constant).
    #: "No change" without a threshold (p >= alpha) and "inconclusive" are not settled.
    settled: bool = False

    @property
    def threshold(self) -> float:
        return self.rule.threshold

    @property
    def direction(self) -> Direction:
        return self.rule.direction


def _validate_adjust(p: FloatArray, method: str) -> None:
    if method not in ("none", "holm", "bh"):
        raise ValueError(f"unknown correction {method!r}; choose none, holm or bh")
    finite = p[np.isfinite(p)]
    if np.any((finite < 0.0) | (finite > 1.0)):
        raise ValueError("p-values must lie in [0, 1]")


def adjust_p_values(p_values: FloatArray, *, method: Correction) -> FloatArray:
    """Holm or Benjamini–Hochberg adjusted p-values, in the input's order (NaN stays NaN)."""
    p = np.asarray(p_values, dtype=np.float64)
    _validate_adjust(p, method)
    out = p.copy()
    if method == "none":
        return out
    present = np.flatnonzero(np.isfinite(p))
    m = len(present)
    if m == 0:
        return out
    order = present[np.argsort(p[present], kind="stable")]
    ranked = p[order]
    rank = np.arange(1, m + 1)
    if method == "holm":
        adjusted = np.maximum.accumulate(ranked * (m - rank + 1))
    else:
        adjusted = np.minimum.accumulate((ranked * m / rank)[::-1])[::-1]
    out[order] = np.minimum(adjusted, 1.0)
    return out


# Outcome codes of :func:`classify`, one per rule of the module text; ``OUTCOME_LABELS``
# maps them to labels and ``SETTLED`` marks those that more trials would not change.
UNDEFINED, REGRESSION, IMPROVEMENT, WITHIN, NOT_SIGNIFICANT, OPEN = range(6)
OUTCOME_LABELS: tuple[Label, ...] = (
    "inconclusive",
    "regression",
    "improvement",
    "no change",
    "no change",
    "inconclusive",
)
SETTLED = frozenset({REGRESSION, IMPROVEMENT, WITHIN})


def classify(
    worse: FloatArray | float,
    worse_lo: FloatArray | float,
    worse_hi: FloatArray | float,
    p: FloatArray | float,
    *,
    alpha: float,
    theta: float,
) -> NDArray[np.int8]:
    """Rules 1 to 6 of the module text on arrays (the both-arms-constant case aside):
    ``worse`` is the effect turned so that positive is worse, ``[worse_lo, worse_hi]`` its
    interval. Returns outcome codes (``OUTCOME_LABELS``). :func:`decide` labels one metric
    with it, and the planning and sequential simulations label thousands at once.
    """
    w = np.asarray(worse, dtype=np.float64)
    lo = np.asarray(worse_lo, dtype=np.float64)
    hi = np.asarray(worse_hi, dtype=np.float64)
    pv = np.asarray(p, dtype=np.float64)
    undefined = np.isnan(pv) | np.isnan(w) | np.isnan(lo) | np.isnan(hi)
    significant = pv < alpha
    code = np.full(np.broadcast(w, lo, hi, pv).shape, OPEN, dtype=np.int8)
    if theta == 0:
        code[~significant] = NOT_SIGNIFICANT
    else:
        code[(-theta < lo) & (hi < theta)] = WITHIN
    code[significant & (w < 0) & (-w >= theta)] = IMPROVEMENT
    code[significant & (w > 0) & (w >= theta)] = REGRESSION
    code[undefined] = UNDEFINED
    return code


def decide(
    comparison: Comparison,
    rule: MetricRule,
    *,
    p_value: float | None = None,
    metric: str = "",
) -> Verdict:
    """The verdict for one metric by the rule in the module text.

    ``p_value`` replaces the comparison's own (pass the adjusted one); ``alpha`` is the
    comparison's.
    """
    p = comparison.p_value if p_value is None else p_value
    sign = 1.0 if rule.direction == "higher-is-worse" else -1.0
    if rule.kind == "relative":
        effect, (lo, hi), unit = comparison.effect_rel, comparison.ci_rel, "relative"
    else:
        effect, (lo, hi), unit = comparison.effect_abs, comparison.ci_abs, "absolute"
    worse = sign * effect
    worse_lo, worse_hi = sorted((sign * lo, sign * hi))
    theta = rule.threshold
    alpha = comparison.alpha

    def verdict(label: Label, reason: str, *, settled: bool) -> Verdict:
        return Verdict(metric, comparison, rule, p, label, reason, settled)

    if comparison.details.get("same_constant") == 1.0 or (
        (math.isnan(p) or p == 1.0)
        and math.isnan(worse_lo + worse_hi)
        and math.isfinite(comparison.mean_a)
        and comparison.mean_a == comparison.mean_b
    ):
        # Both arms constant and equal (an error rate of 0 in each): the t-tests cannot run
        # (p NaN), the per-trial tests see only zero differences (p 1), and neither has an
        # interval around a zero baseline; there is no difference to explain.
        return verdict("no change", "both arms measured the same constant value", settled=True)
    code = int(classify(worse, worse_lo, worse_hi, p, alpha=alpha, theta=theta))
    reasons = {
        UNDEFINED: "the model could not compute an effect or p-value",
        REGRESSION: f"p {p:.3g} < {alpha} and the {unit} effect is worse by >= {theta}",
        IMPROVEMENT: f"p {p:.3g} < {alpha} and the {unit} effect is better by >= {theta}",
        WITHIN: f"the interval lies within ±{theta} ({unit})",
        NOT_SIGNIFICANT: f"p {p:.3g} >= {alpha} and no threshold is set",
        OPEN: (
            f"the interval reaches beyond ±{theta} ({unit}) without a significant change that large"
        ),
    }
    return verdict(OUTCOME_LABELS[code], reasons[code], settled=code in SETTLED)


def _validate_verdicts(
    comparisons: Mapping[str, Comparison], rules: Mapping[str, MetricRule]
) -> None:
    unknown = sorted(set(rules) - set(comparisons))
    if unknown:
        raise ValueError(
            f"thresholds given for metrics without a comparison: {', '.join(unknown)}; "
            f"check the metric names (known: {', '.join(sorted(comparisons))})"
        )


def verdicts(
    comparisons: Mapping[str, Comparison],
    rules: Mapping[str, MetricRule] | None = None,
    *,
    correction: Correction = "none",
) -> dict[str, Verdict]:
    """Verdicts for every metric, p-values adjusted across them by ``correction`` first.

    A metric without a rule gets ``MetricRule()``: no threshold, higher is worse.
    """
    given = rules or {}
    _validate_verdicts(comparisons, given)
    names = list(comparisons)
    adjusted = adjust_p_values(
        np.array([comparisons[name].p_value for name in names], dtype=np.float64),
        method=correction,
    )
    return {
        name: decide(
            comparisons[name],
            given.get(name, MetricRule()),
            p_value=float(adjusted[i]),
            metric=name,
        )
        for i, name in enumerate(names)
    }
