"""How many trials the verdict needs: power of the actual verdict rule, by simulation.

The textbook count, ``((z_{1-alpha/2} + z_power)·sd / threshold)²`` (:func:`~hairline.stats.
planning.trials_needed`), is the power of a test that the effect is not 0 when it is the
threshold. hairline's verdict asks more: "regression" needs p < alpha AND an estimate of at
least the threshold (:mod:`~hairline.stats.verdict`), with the model the analysis falls back
to (the paired t-test up to 4 trials, the trimmed t-test from 5, each with fewer degrees of
freedom than the formula's normal). Planned by the formula, 6 trials for a 1% threshold
flagged a 1% regression 47% of the time, not 80%.

And no number of trials flags a regression of exactly the threshold with more than about
half the time: the estimate lands below it as often as above. So the question a plan
answers is: with how many trials is a true regression of ``effect`` (larger than the
threshold; ``hairline plan`` asks about twice the threshold unless told) labelled
"regression" with probability ``power``? :func:`verdict_power` simulates exactly that: per
trial a relative difference drawn from N(effect, sd), the fallback model for that many
trials on arrays (:mod:`.trialcore`, equal to the registered models), the verdict rule
(:func:`~hairline.stats.verdict.classify`); 4,000 seeded experiments, so the power is known
to about ±0.7 points. :func:`trials_for_verdict` returns the fewest trials whose simulated
power reaches the target, counting up from 2 (the power is not monotone: the trimmed test
from 5 trials gives up some power on clean data for robustness), or, when the normal
approximation expects more than 30, searching around that guess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hairline.stats import dist
from hairline.stats.models import per_trial_fallback
from hairline.stats.trialcore import per_trial_decision
from hairline.stats.verdict import REGRESSION, classify

__all__ = [
    "DEFAULT_SIMULATIONS",
    "VerdictPlan",
    "VerdictPower",
    "trials_for_verdict",
    "verdict_power",
]

DEFAULT_SIMULATIONS = 4000
_MAX_TRIALS = 500
_SCAN_FROM_TWO_BELOW = 30
_SEED = 20_240_603


@dataclass(frozen=True)
class VerdictPower:
    """Simulated share of experiments labelled "regression", and the median half-width of
    their intervals (what the report would print)."""

    power: float
    half_width: float


@dataclass(frozen=True)
class VerdictPlan:
    """The fewest trials at which the verdict flags a regression of ``effect`` with at
    least ``power`` (simulated ``achieved_power``); ``below`` is the power one trial fewer,
    ``half_width`` the median interval half-width at ``trials``. ``threshold``, ``effect``
    and ``sd_per_trial`` share units (fractions when relative)."""

    threshold: float
    effect: float
    alpha: float
    power: float
    sd_per_trial: float
    trials: int
    achieved_power: float
    below: float
    half_width: float
    model: str
    simulations: int


def _validate(sd: float, threshold: float, effect: float, alpha: float, power: float) -> None:
    if not (math.isfinite(sd) and sd > 0):
        raise ValueError(f"sd_per_trial must be a finite spread > 0, got {sd}")
    if not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite number >= 0, got {threshold}")
    if not (math.isfinite(effect) and effect > 0):
        raise ValueError(f"effect must be a regression > 0 to detect, got {effect}")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha} and {power}")


def _noise(simulations: int, trials: int, seed: int) -> np.ndarray:
    # One draw per trial count, so that each count's power is a plain seeded simulation.
    return np.random.default_rng([_SEED, seed, trials]).standard_normal((simulations, trials))


def verdict_power(
    sd_per_trial: float,
    *,
    threshold: float,
    effect: float,
    trials: int,
    alpha: float = 0.05,
    simulations: int = DEFAULT_SIMULATIONS,
    seed: int = 0,
    model: str | None = None,
) -> VerdictPower:
    """The share of simulated experiments of ``trials`` trials, each trial's relative
    difference drawn from N(``effect``, ``sd_per_trial``), that the verdict labels
    "regression" at ``threshold`` (module text). ``model`` defaults to the fallback for
    that many trials."""
    _validate(sd_per_trial, threshold, effect, alpha, 0.5)
    if trials < 2:
        return VerdictPower(0.0, math.inf)
    differences = effect + sd_per_trial * _noise(simulations, trials, seed)
    # Arm A at 1 in every trial: the relative and the absolute differences coincide.
    decision = per_trial_decision(
        model or per_trial_fallback(trials), np.ones_like(differences), 1.0 + differences, alpha
    )
    lo, hi = decision.ci_rel
    code = classify(decision.effect_rel, lo, hi, decision.p_value, alpha=alpha, theta=threshold)
    return VerdictPower(float(np.mean(code == REGRESSION)), float(np.median((hi - lo) / 2)))


def _guess(sd: float, threshold: float, effect: float, alpha: float, power: float) -> int:
    """The normal approximation: significant with ``power``, and the estimate past the
    threshold with ``power``; the larger of the two counts."""
    z_power = float(dist.norm_ppf(power))
    significant = ((float(dist.norm_ppf(1 - alpha / 2)) + z_power) * sd / effect) ** 2
    margin = effect - threshold
    beyond = (z_power * sd / margin) ** 2 if margin > 0 else 0.0
    return max(2, math.ceil(max(significant, beyond)))


def trials_for_verdict(
    sd_per_trial: float,
    *,
    threshold: float,
    effect: float,
    alpha: float = 0.05,
    power: float = 0.8,
    simulations: int = DEFAULT_SIMULATIONS,
    seed: int = 0,
    max_trials: int = _MAX_TRIALS,
) -> VerdictPlan:
    """The fewest trials at which :func:`verdict_power` reaches ``power`` (the fallback
    model of each count). ``ValueError`` when no count up to ``max_trials`` does, which is
    always the case for a regression at (or below) the threshold and power above about
    one half: the message says so and what to ask instead."""
    _validate(sd_per_trial, threshold, effect, alpha, power)

    simulated: dict[int, VerdictPower] = {}

    def at(n: int) -> float:
        simulated[n] = verdict_power(
            sd_per_trial, threshold=threshold, effect=effect, trials=n, alpha=alpha,
            simulations=simulations, seed=seed,
        )  # fmt: skip
        return simulated[n].power

    def unreachable() -> ValueError:
        return ValueError(
            f"no number of trials up to {max_trials} flags a regression of {effect:g} with "
            f"power {power:g} at threshold {threshold:g}: the verdict needs the estimate to "
            f"reach the threshold, so a regression at the threshold is flagged about half "
            f"the time whatever the trials; plan for a larger effect (e.g. "
            f"{max(2 * threshold, effect * 1.5):g}) or reduce the per-trial spread"
        )

    if effect <= threshold and power > 0.5:
        raise unreachable()
    guess = _guess(sd_per_trial, threshold, effect, alpha, power)
    if guess > max_trials:
        raise unreachable()
    # The fallback's power is not monotone in trials (the trimmed test from 5 trials, and
    # each step of its trimming, gives up some power on clean data), so the fewest trials
    # are found by counting up; past 30, by searching around the guess (one fewer always
    # falls short, a smaller count across a step of the trimming might not).
    n = 2 if guess <= _SCAN_FROM_TWO_BELOW else guess
    powers = {n: at(n)}
    if n > 2 and powers[n] >= power:
        while n > 2 and powers.setdefault(n - 1, at(n - 1)) >= power:
            n -= 1
    else:
        while powers[n] < power:
            if n >= max_trials:
                raise unreachable()
            n += 1
            powers[n] = at(n)
    below = 0.0
    if n > 2:
        below = powers[n - 1] if n - 1 in powers else at(n - 1)
    return VerdictPlan(
        threshold=float(threshold),
        effect=float(effect),
        alpha=float(alpha),
        power=float(power),
        sd_per_trial=float(sd_per_trial),
        trials=n,
        achieved_power=powers[n],
        below=below,
        half_width=simulated[n].half_width,
        model=per_trial_fallback(n),
        simulations=simulations,
    )
