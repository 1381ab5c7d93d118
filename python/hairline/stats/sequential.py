"""Sequential trials: analyse after every trial, stop as soon as the verdicts are settled.

With ``[design] trials = "auto"`` the lab analyses all trials so far after each one, from
trial ``first_look`` on, and stops when every gated metric's verdict is settled (a
regression or an improvement, or no change because the interval lies within ±threshold) or
``max_trials`` trials are done. Looking after every trial at the plain alpha would flag an
A/A experiment far more often than alpha (with looks at 3 to 15 trials and the fallback
models, 22% at alpha 5%): each look is another chance for noise to cross.

**The rule: repeated confidence intervals at one calibrated level** (Pocock's idea, as
repeated intervals after Jennison and Turnbull). Every look uses the same nominal level
alpha' for the p-value and the interval, chosen so that under no change the probability
that ANY look from ``first_look`` to ``max_trials`` rejects is alpha. Since each model's
interval inverts its own test, the interval printed at a look excludes 0 exactly when that
look's test rejects, so the stop rule and the report agree, and the family of intervals
covers the true effect at every look at once with probability 1 - alpha.

alpha' comes from a seeded simulation of the very statistics the looks compute: 20,000
sequences of ``max_trials`` standard normal per-trial differences (the statistics are
scale-free, so one scale serves every metric), the p-value of the model each look uses on
the first n of them (:func:`~hairline.stats.models.per_trial_fallback`: the paired t-test
up to 4 trials, the calibrated trimmed t-test from 5), the smallest p over the looks per
sequence, and alpha' the alpha-quantile of those minima. The result is cached per
(alpha, first_look, max_trials, model). Its Monte Carlo error is about ±0.15 points of
family-wise rate at alpha 5%; tests/stats/test_sequential.py checks the whole procedure
on skewed per-request data with and without an outlying batch. Models without a per-trial
form to simulate (sign flips, row t-tests, the bootstraps, the ci-test) and designs beyond
``MAX_CALIBRATED_TRIALS`` get Bonferroni's alpha / looks, which is valid for any statistic
but conservative.

Pinpoint "doubles attempts ad hoc"; here the number of looks is fixed in advance by
``first_look`` and ``max_trials``, and the error rate over all of them is alpha.

The API the lab uses: :data:`FIRST_LOOK`, :func:`looks`, :func:`look_alpha`,
:func:`settled`, :func:`should_stop`. :func:`sequential_outcomes` runs the whole procedure
on simulated trials (power, false positives and expected trials; docs/stats.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from hairline.stats._modelkit import FloatArray
from hairline.stats.models import model_info, per_trial_fallback
from hairline.stats.trialcore import per_trial_decision
from hairline.stats.verdict import (
    IMPROVEMENT,
    REGRESSION,
    SETTLED,
    WITHIN,
    Direction,
    Verdict,
    classify,
)

__all__ = [
    "CALIBRATION_SEQUENCES",
    "FIRST_LOOK",
    "MAX_CALIBRATED_TRIALS",
    "MIN_FIRST_LOOK",
    "SequentialOutcomes",
    "look_alpha",
    "look_model",
    "looks",
    "sequential_outcomes",
    "settled",
    "should_stop",
    "validate_design",
]

#: The first look: the per-trial models need 2 trials, and at 2 a look spends part of alpha
#: on a t-test with one degree of freedom that cannot flag anything a lab would see.
FIRST_LOOK = 3
MIN_FIRST_LOOK = 2
#: Beyond this many trials the level is Bonferroni's: calibrating would take seconds per
#: look count, and so many looks are rare.
MAX_CALIBRATED_TRIALS = 50
CALIBRATION_SEQUENCES = 20_000
_CALIBRATION_SEED = 20_240_602
# Calibrated families: the statistic on per-trial values is the same whatever the
# preprocessing did to the rows.
_FAMILIES = {"paired-t": "paired-t-none", "trimmed-t": "trimmed-t-none"}
_LABEL_SETTLED = frozenset({"regression", "improvement", "no change"})


def validate_design(first_look: int, max_trials: int) -> None:
    """``ValueError`` naming the fix unless MIN_FIRST_LOOK <= first_look <= max_trials."""
    if isinstance(first_look, bool) or not isinstance(first_look, int):
        raise ValueError(f"first_look must be a whole number of trials, got {first_look!r}")
    if first_look < MIN_FIRST_LOOK:
        raise ValueError(
            f"the first look needs at least {MIN_FIRST_LOOK} trials (a per-trial test needs "
            f"two), got {first_look}; use {FIRST_LOOK}"
        )
    if isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < first_look:
        raise ValueError(
            f"max_trials must be a whole number >= the first look ({first_look}), got "
            f"{max_trials!r}"
        )


def looks(first_look: int, max_trials: int) -> range:
    """The trial counts at which the design analyses: first_look, ..., max_trials."""
    validate_design(first_look, max_trials)
    return range(first_look, max_trials + 1)


def look_model(trials: int, model: str | None = None) -> str:
    """The model a look at ``trials`` trials uses: ``model``, or the per-trial fallback."""
    return per_trial_fallback(trials) if model is None else model


def look_alpha(alpha: float, first_look: int, max_trials: int, model: str | None = None) -> float:
    """The nominal level of every look's p-value and interval (module text).

    ``model`` is the model every look uses; ``None`` means the fallback for each look's
    trial count (``paired-t-none`` below 5 trials, ``trimmed-t-none`` from 5). One look is
    alpha itself.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    validate_design(first_look, max_trials)
    if model is not None:
        model_info(model)  # an unknown name fails here, listing the valid ones
    if first_look == max_trials:
        return float(alpha)
    family = None if model is None else _FAMILIES.get(model_info(model).test)
    if (model is not None and family is None) or max_trials > MAX_CALIBRATED_TRIALS:
        return float(alpha) / len(looks(first_look, max_trials))
    return _calibrated(float(alpha), first_look, max_trials, family)


@functools.lru_cache(maxsize=128)
def _calibrated(alpha: float, first_look: int, max_trials: int, model: str | None) -> float:
    rng = np.random.default_rng([_CALIBRATION_SEED, first_look, max_trials])
    means_a = np.ones((CALIBRATION_SEQUENCES, max_trials))
    means_b = 1.0 + 0.01 * rng.standard_normal((CALIBRATION_SEQUENCES, max_trials))
    smallest = np.ones(CALIBRATION_SEQUENCES)
    for n in looks(first_look, max_trials):
        decision = per_trial_decision(look_model(n, model), means_a[:, :n], means_b[:, :n], alpha)
        smallest = np.fmin(smallest, decision.p_value)
    ordered = np.sort(smallest)
    # At most alpha·N sequences have a minimum strictly below the level.
    return float(ordered[math.floor(alpha * CALIBRATION_SEQUENCES)])


def settled(verdict: Verdict | str) -> bool:
    """Whether more trials would not change this verdict: a regression, an improvement,
    or no change because the interval lies within ±threshold.

    Pass the :class:`~hairline.stats.verdict.Verdict` where you have it: a bare label cannot
    tell "no change, the interval is within the threshold" (settled) from "no change, p >=
    alpha and no threshold is set" (absence of evidence, which more trials could overturn),
    and counts both as settled.
    """
    if isinstance(verdict, Verdict):
        return verdict.settled
    return verdict in _LABEL_SETTLED


def should_stop(verdicts: Iterable[Verdict | str], trials: int, max_trials: int) -> bool:
    """Stop after ``trials`` trials: every gated verdict is settled, or the design is done.
    No verdicts at all is not settled."""
    found = list(verdicts)
    return trials >= max_trials or (bool(found) and all(settled(v) for v in found))


@dataclass(frozen=True)
class SequentialOutcomes:
    """How the sequential procedure ended on simulated experiments: the share of each end
    and the trials it took. ``unsettled`` ran to max_trials without a settled verdict."""

    regression: float
    improvement: float
    no_change: float
    unsettled: float
    mean_trials: float
    trials: FloatArray
    look_alpha: float
    experiments: int


def sequential_outcomes(
    means_a: FloatArray,
    means_b: FloatArray,
    *,
    threshold: float,
    alpha: float = 0.05,
    first_look: int = FIRST_LOOK,
    direction: Direction = "higher-is-worse",
    model: str | None = None,
) -> SequentialOutcomes:
    """Run the sequential procedure on simulated experiments: per-trial arm means of shape
    (experiments, max_trials), trials in the order they ran.

    At each look every experiment still running is analysed with the look's model at
    :func:`look_alpha` and labelled by :func:`~hairline.stats.verdict.classify` with the
    relative ``threshold``; a settled experiment stops there. ``model`` must have an array
    form (``paired-t-none``, ``trimmed-t-none``) or be None (the fallback per look).
    """
    a = np.asarray(means_a, dtype=np.float64)
    b = np.asarray(means_b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"means must be (experiments, trials) arrays, got {a.shape}, {b.shape}")
    experiments, max_trials = a.shape
    level = look_alpha(alpha, first_look, max_trials, model)
    sign = 1.0 if direction == "higher-is-worse" else -1.0
    outcome = np.full(experiments, -1, dtype=np.int64)
    stopped_at = np.full(experiments, max_trials, dtype=np.int64)
    running = np.ones(experiments, dtype=bool)
    for n in looks(first_look, max_trials):
        rows = np.flatnonzero(running)
        if rows.size == 0:
            break
        decision = per_trial_decision(look_model(n, model), a[rows, :n], b[rows, :n], level)
        lo, hi = sign * decision.ci_rel[0], sign * decision.ci_rel[1]
        code = classify(
            sign * decision.effect_rel,
            np.minimum(lo, hi),
            np.maximum(lo, hi),
            decision.p_value,
            alpha=level,
            theta=threshold,
        )
        done = np.isin(code, list(SETTLED))
        outcome[rows[done]] = code[done]
        stopped_at[rows[done]] = n
        running[rows[done]] = False
    trials = stopped_at.astype(np.float64)
    return SequentialOutcomes(
        regression=float(np.mean(outcome == REGRESSION)),
        improvement=float(np.mean(outcome == IMPROVEMENT)),
        no_change=float(np.mean(outcome == WITHIN)),
        unsettled=float(np.mean(outcome == -1)),
        mean_trials=float(np.mean(trials)),
        trials=trials,
        look_alpha=level,
        experiments=experiments,
    )
