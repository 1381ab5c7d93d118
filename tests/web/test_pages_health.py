"""A/A health: the false-positive rate over a rolling window and its binomial band,
checked by simulation against models whose true false-positive rate is known."""

from __future__ import annotations

import numpy as np
import pytest

from hairline.web.health import AaRun, binomial_band, fpr_over_time, is_false_positive


def _runs(flags: np.ndarray) -> list[AaRun]:
    return [
        AaRun(experiment_id=i + 1, at=float(i), label="regression" if hit else "no change")
        for i, hit in enumerate(flags)
    ]


def test_only_a_claimed_change_is_a_false_positive() -> None:
    assert not is_false_positive("no change")
    assert not is_false_positive("inconclusive")
    assert is_false_positive("regression")
    assert is_false_positive("improvement")


def test_the_band_holds_the_counts_of_a_calibrated_model_95_percent_of_the_time() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. P(Binomial(20, 0.05)
    <= 3) is 0.984, 17 sd of 20,000 draws above 0.95."""
    rng = np.random.default_rng(14)
    alpha, window = 0.05, 20
    low, high = binomial_band(window, alpha)
    assert (low, high) == (0, 3)
    counts = rng.binomial(window, alpha, size=20_000)
    inside = np.mean((counts >= low) & (counts <= high))
    assert inside >= 0.95


def test_a_calibrated_model_stays_in_its_band_and_a_loose_one_leaves_it() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The calibrated share
    above the band is near 1.6% (the comment) against 0.04, and the loose model's P(Binomial(20,
    0.2) > 3) is 0.59 against 0.5, over overlapping windows: margins not recorded for seed 7."""
    rng = np.random.default_rng(7)
    alpha = 0.05
    calibrated = fpr_over_time(_runs(rng.random(4000) < alpha), alpha=alpha, window=20)
    loose = fpr_over_time(_runs(rng.random(400) < 4 * alpha), alpha=alpha, window=20)
    # P(Binomial(20, 0.05) > 3) = 1.6%; the windows overlap, so their share varies more.
    full = [p for p in calibrated if p.runs == 20]
    assert np.mean([p.above_band for p in full]) < 0.04
    assert np.mean([p.above_band for p in loose if p.runs == 20]) > 0.5


def test_the_window_rolls_and_grows_from_the_first_run() -> None:
    runs = _runs(np.array([True, False, False, True, False]))
    points = fpr_over_time(runs[::-1], alpha=0.05, window=3)  # any order: sorted by time
    assert [p.experiment_id for p in points] == [1, 2, 3, 4, 5]
    assert [p.runs for p in points] == [1, 2, 3, 3, 3]
    assert [p.false_positives for p in points] == [1, 1, 1, 1, 1]
    # One run in one: a rate of 100%, yet one false positive in one run says nothing.
    assert points[0].rate == 1.0 and not points[0].above_band


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1])
def test_an_alpha_outside_zero_one_is_refused(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha"):
        binomial_band(10, alpha)
