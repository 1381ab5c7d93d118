"""The permutation test on the vector M of per-trial differences of means."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from hairline.stats._modelkit import DegenerateDataWarning
from hairline.stats.data import MetricSample
from hairline.stats.permutation import per_trial_means, permutation_test, sign_flip_test
from hairline.stats.simulate import in_binomial_band
from hairline.stats.ttest import t_test


def trials_sample(
    rng: np.random.Generator,
    *,
    trials: int,
    rows: int = 20,
    effect_rel: float = 0.0,
    trial_sd: float = 3.0,
) -> MetricSample:
    """Each trial shifts both arms by the same random amount (shared machine state)."""
    trial = np.repeat(np.arange(trials), 2 * rows)
    arm = np.tile(np.repeat([0, 1], rows), trials)
    level = 100.0 + rng.normal(0.0, trial_sd, trials)[trial]
    value = (level + rng.normal(0.0, 5.0, len(trial))) * np.where(arm == 1, 1 + effect_rel, 1.0)
    return MetricSample.from_arrays(value, arm, trial=trial)


@pytest.mark.parametrize("trials", [3, 5, 8, 10])
def test_exact_p_value_matches_scipy(trials: int) -> None:
    m = np.random.default_rng(trials).normal(0.5, 1.0, trials)
    ours = sign_flip_test(m, rng=np.random.default_rng(0))
    theirs = sps.permutation_test(
        (m,), np.mean, permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
    )
    assert ours.exact and ours.n_permutations == 2**trials
    assert ours.p_value == pytest.approx(theirs.pvalue, abs=1e-12)


def test_monte_carlo_agrees_with_enumeration() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. 0.01 is at least 4 sd
    of a p-value from 40,000 sign flips (at most 0.0025)."""
    m = np.random.default_rng(4).normal(0.3, 1.0, 18)
    exact = sign_flip_test(m, rng=np.random.default_rng(0), max_exact_trials=18)
    sampled = sign_flip_test(
        m, rng=np.random.default_rng(1), max_exact_trials=10, n_resamples=40_000
    )
    assert exact.exact and not sampled.exact
    assert sampled.p_value == pytest.approx(exact.p_value, abs=0.01)


def test_all_zero_differences_are_not_significant() -> None:
    assert sign_flip_test(np.zeros(6), rng=np.random.default_rng(0)).p_value == 1.0


def test_vector_m_is_per_trial_difference_of_means() -> None:
    sample = MetricSample.from_arrays(
        [1.0, 3.0, 4.0, 10.0, 20.0, 26.0], [0, 0, 1, 0, 1, 1], trial=[7, 7, 7, 9, 9, 9]
    )
    trials, means_a, means_b = per_trial_means(sample)
    assert trials.tolist() == [7.0, 9.0]
    assert (means_b - means_a).tolist() == [2.0, 13.0]


def test_trial_without_an_arm_is_named() -> None:
    sample = MetricSample.from_arrays([1.0, 2.0, 3.0], [0, 1, 0], trial=[1, 1, 2])
    with pytest.raises(ValueError, match="trial 2 has no rows of arm B"):
        permutation_test(sample, rng=np.random.default_rng(0))


def test_missing_trial_column_is_named() -> None:
    with pytest.raises(ValueError, match="'trial'"):
        permutation_test(MetricSample.from_arrays([1.0, 2.0], [0, 1]), rng=np.random.default_rng(0))


def test_false_positive_rate_holds_where_pooled_t_test_does_not() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margin is the
    check's own: a correct model falls outside the 99.9% binomial band for about 1 seed in 1,000, so
    another seed, or a numpy that changes its streams, could fail it that often; this seed's
    distance from the band is not recorded. The pooled t's rate (bound 0.15) has a margin not
    recorded for this seed."""
    rng = np.random.default_rng(99)
    sims, perm_hits, t_hits = 400, 0, 0
    for _ in range(sims):
        # Arms of a trial share its level, and each arm of each trial also drifts a bit on
        # its own: rows within an arm and trial are correlated.
        sample = trials_sample(rng, trials=8)
        drift = rng.normal(0.0, 2.0, 16)[sample.trial * 2 + sample.arm]  # type: ignore[operator]
        sample = MetricSample.from_arrays(sample.value + drift, sample.arm, trial=sample.trial)
        perm_hits += permutation_test(sample, rng=rng).p_value < 0.05
        t_hits += t_test(sample).p_value < 0.05
    assert in_binomial_band(perm_hits, sims, 0.05)
    assert t_hits / sims > 0.15


def test_detects_a_regression_hidden_by_trial_noise() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margin of the
    power bound (80 of 100) is not recorded for this seed."""
    rng = np.random.default_rng(5)
    found = sum(
        permutation_test(
            trials_sample(rng, trials=10, effect_rel=0.02, trial_sd=10.0), rng=rng
        ).p_value
        < 0.05
        for _ in range(100)
    )
    assert found >= 80


def test_effect_and_interval_are_relative_to_the_trial_means() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The 5% effect with 5%
    row noise over 12 trials of 20 rows has an SE near 0.5%, so 0.03 to 0.07 is about 4 SE either
    side."""
    rng = np.random.default_rng(3)
    result = permutation_test(trials_sample(rng, trials=12, effect_rel=0.05), rng=rng)
    assert result.model == "permutation-none"
    assert result.ci_rel[0] < result.effect_rel < result.ci_rel[1]
    assert 0.03 < result.effect_rel < 0.07
    assert result.details["exact"] == 1.0


def test_too_few_trials_warns_that_it_cannot_reject() -> None:
    result = permutation_test(
        trials_sample(np.random.default_rng(0), trials=4), rng=np.random.default_rng(0)
    )
    assert result.p_value >= 2 / 16
    assert any("run at least 6 trials" in w for w in result.warnings)


def test_one_trial_is_degenerate() -> None:
    with pytest.warns(DegenerateDataWarning, match="at least 2 trials"):
        result = permutation_test(
            trials_sample(np.random.default_rng(0), trials=1), rng=np.random.default_rng(0)
        )
    assert math.isnan(result.p_value)
