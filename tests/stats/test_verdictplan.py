"""Planning by the verdict actually given: the trials at which the fallback model and the
threshold rule flag a regression with the asked power, checked by an independent
simulation through the registered models and ``decide``."""

from __future__ import annotations

import numpy as np
import pytest

from hairline.stats.data import MetricSample
from hairline.stats.models import run_model
from hairline.stats.planning import trials_needed
from hairline.stats.selection import fallback_model
from hairline.stats.verdict import MetricRule, decide
from hairline.stats.verdictplan import trials_for_verdict, verdict_power


def lab_power(
    sd: float, *, threshold: float, effect: float, trials: int, sims: int, seed: int
) -> float:
    """The share of simulated experiments the analysis path labels "regression": each trial
    a batch row per arm at its own level, B's relative difference drawn from N(effect, sd),
    the fallback model for the sample, the verdict rule."""
    rng = np.random.default_rng(seed)
    rule = MetricRule(threshold=threshold)
    found = 0
    for _ in range(sims):
        level = 1000.0 * rng.lognormal(0.0, 0.05, trials)
        b = level * (1.0 + rng.normal(effect, sd, trials))
        sample = MetricSample.from_arrays(
            np.c_[level, b].ravel(), np.tile([0, 1], trials), trial=np.repeat(np.arange(trials), 2)
        )
        comparison = run_model(fallback_model(sample), sample, rng=rng)
        found += decide(comparison, rule).label == "regression"
    return found / sims


@pytest.mark.parametrize(
    ("sd", "expected_model"), [(0.008, "paired-t-none"), (0.012, "trimmed-t-none")]
)
def test_the_answer_reaches_the_asked_power_and_one_trial_fewer_does_not(
    sd: float, expected_model: str
) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margins are thin:
    600 runs give a binomial sd near 1.6 points, so 0.05 around the planned power is about 3 sd, and
    'fewer < 0.8' and 'at >= 0.75' sit a few points from the planned power by design; this seed's
    distances are not recorded."""
    plan = trials_for_verdict(sd, threshold=0.01, effect=0.02, power=0.8)
    assert plan.model == expected_model
    assert plan.achieved_power >= 0.8 > plan.below
    at = lab_power(sd, threshold=0.01, effect=0.02, trials=plan.trials, sims=600, seed=1)
    fewer = lab_power(sd, threshold=0.01, effect=0.02, trials=plan.trials - 1, sims=600, seed=2)
    assert at == pytest.approx(plan.achieved_power, abs=0.05)
    assert at >= 0.75
    assert fewer < 0.8


def test_the_normal_formula_planned_for_a_power_the_verdict_does_not_give() -> None:
    """False failure: none: verdict_power is a seeded simulation of 4,000 experiments; the power is
    31% (docs/stats.md) against the bound of 0.5."""
    # What `hairline plan` answered before: 6 trials for a 1% threshold with a per-trial
    # spread of 0.87%; the verdict then flags a 1% regression well under half the time.
    sd = 0.0087
    assert trials_needed(sd, threshold=0.01).trials == 6
    assert verdict_power(sd, threshold=0.01, effect=0.01, trials=6).power < 0.5


def test_a_regression_at_the_threshold_cannot_be_planned_for_high_power() -> None:
    """False failure: none: verdict_power is a seeded simulation of 4,000 experiments (binomial sd
    0.8 points at 0.5), the same on every run."""
    # The verdict needs the estimate to reach the threshold: about half the time at most.
    many = verdict_power(0.005, threshold=0.01, effect=0.01, trials=40)
    assert 0.4 < many.power < 0.6
    with pytest.raises(ValueError, match="about half the time"):
        trials_for_verdict(0.005, threshold=0.01, effect=0.01, power=0.8, max_trials=60)


def test_more_spread_needs_more_trials_and_the_half_width_shrinks_with_them() -> None:
    """False failure: none: trials_for_verdict runs seeded simulations, the same on every run."""
    plans = [trials_for_verdict(sd, threshold=0.01, effect=0.02) for sd in (0.005, 0.01, 0.02)]
    assert [p.trials for p in plans] == sorted(p.trials for p in plans)
    assert plans[0].trials < plans[-1].trials
    assert all(p.half_width < 0.02 for p in plans)


def test_bad_arguments_name_the_problem() -> None:
    with pytest.raises(ValueError, match="sd_per_trial"):
        trials_for_verdict(0.0, threshold=0.01, effect=0.02)
    with pytest.raises(ValueError, match="effect must be"):
        trials_for_verdict(0.01, threshold=0.01, effect=0.0)
