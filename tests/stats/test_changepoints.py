"""Change points by seeded simulation against known truth: a step is found where it is,
a single spike is set aside and never a change, a slow drift of small steps is found, and
a series without change is split no more often than alpha allows."""

from __future__ import annotations

import numpy as np
import pytest

from hairline.stats.changepoints import DEFAULT_ALPHA, change_points, spikes
from hairline.stats.simulate import in_binomial_band


def noise(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 1.0, n)


def test_a_step_is_found_at_its_index_with_its_size_and_p_value() -> None:
    values = noise(1, 60)
    values[35:] += 3.0  # three noise units: below a threshold of four, one commit's doing
    (change,) = change_points(values)
    assert change.index == 35
    assert abs(change.before) < 0.5 and abs(change.after - 3.0) < 0.5
    assert change.size == change.after - change.before
    assert change.p_value <= DEFAULT_ALPHA


def test_two_steps_are_both_found_and_the_levels_between_them_reported() -> None:
    values = noise(2, 80)
    values[20:] -= 4.0
    values[55:] += 6.0
    found = change_points(values)
    assert [c.index for c in found] == [20, 55]
    assert found[0].after == found[1].before  # the level between the two changes


def test_a_single_spike_is_set_aside_not_reported() -> None:
    values = noise(3, 50)
    values[24] += 12.0
    assert spikes(values) == (24,)
    assert change_points(values) == ()
    # The same spike next to a real step neither hides it nor moves it.
    values[30:] += 3.0
    assert [c.index for c in change_points(values)] == [30]


def test_the_first_points_of_a_step_at_the_newest_end_are_not_spikes() -> None:
    values = noise(4, 40)
    values[37:] += 8.0  # three experiments at a new level: the third confirms it
    assert spikes(values) == ()
    assert [c.index for c in change_points(values)] == [37]
    assert change_points(values[:39]) == ()  # two are not a change yet


def test_a_slow_drift_of_small_steps_is_found_inside_it() -> None:
    """False failure: none with these seeds (the outcome is fixed by them). Over other
    seeds a ramp of 20 steps of 0.3 sigma was missed in none of 200 histories of the
    benchmark's ramps (bench/changepoints: recall 1.000)."""
    for seed in range(20):
        values = noise(100 + seed, 60)
        values[20:40] += 0.3 * np.arange(1, 21)  # each step a tenth of a threshold of 3 sigma
        values[40:] += 6.0
        found = [c.index for c in change_points(values, seed=seed)]
        assert found and all(17 <= i <= 43 for i in found), (seed, found)


def test_a_run_of_small_same_signed_effects_is_found_at_both_ends() -> None:
    # A/Bs of each change against its parent: fifteen changes each +2.5 sigma (below a
    # threshold of 4), then none.
    values = noise(5, 60)
    values[25:40] += 2.5
    found = change_points(values)
    assert found[0].index == 25 and abs(found[1].index - 40) <= 1, found
    assert found[0].size > 1.5 and found[1].size < -1.5  # medians of 15 and 20 noisy points


def test_series_without_change_are_split_at_most_as_often_as_alpha() -> None:
    """False failure: the count is fixed by the seeds; one outside the 99.9% band of
    Binomial(300, alpha) would come with probability 1e-3 from a calibrated test, and the
    permutation test is exact."""
    hits = sum(bool(change_points(noise(1000 + s, 24), seed=s)) for s in range(300))
    assert in_binomial_band(hits, 300, DEFAULT_ALPHA), hits


def test_a_spike_does_not_make_a_change_more_likely() -> None:
    """False failure: as above, at alpha 0.05 (99 shuffles: p <= 0.05 is 5 of 100 under no
    change, exactly), where the band is wide enough to see a rate above alpha."""
    hits = 0
    for s in range(300):
        values = noise(2000 + s, 24)
        values[s % 24] += 10.0
        hits += bool(change_points(values, alpha=0.05, permutations=99, seed=s))
    assert in_binomial_band(hits, 300, 0.05), hits


def test_the_same_series_and_seed_give_the_same_answer() -> None:
    values = noise(6, 70)
    values[40:] += 2.0
    assert change_points(values, seed=3) == change_points(values.tolist(), seed=3)


def test_a_series_too_short_or_not_finite() -> None:
    assert change_points([1.0, 2.0, 3.0, 4.0, 5.0]) == ()  # fewer than 2 x 3 points
    with pytest.raises(ValueError, match="finite"):
        change_points([0.0, float("nan"), 1.0])
