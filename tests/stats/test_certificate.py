"""The certificate's two figures against known truth: an experiment whose true effect is
its MDE is detected with about the promised power, and an A/A record is judged against the
binomial band of alpha."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hairline.stats import dist
from hairline.stats.certificate import aa_record, binomial_band, certify, mde


def test_the_mde_of_a_95_percent_interval_is_1_43_half_widths_at_80_percent_power() -> None:
    assert mde((-0.01, 0.01), 0.05) == pytest.approx(0.01 * (1.95996 + 0.84162) / 1.95996, rel=1e-4)
    assert mde((0.02, 0.06), 0.05) == pytest.approx(mde((-0.02, 0.02), 0.05))  # width only
    assert mde((math.nan, 0.01), 0.05) is None
    with pytest.raises(ValueError, match="power"):
        mde((-0.01, 0.01), 0.05, power=1.0)


def _paired_t(effects: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``effects`` (runs x trials): the t interval's bounds and whether it
    excludes 0."""
    n = effects.shape[1]
    mean = effects.mean(axis=1)
    half = float(dist.t_ppf(1 - alpha / 2, n - 1)) * effects.std(axis=1, ddof=1) / math.sqrt(n)
    return mean - half, mean + half, (mean - half > 0) | (mean + half < 0)


def test_an_effect_the_size_of_the_mde_is_found_about_as_often_as_the_power_says() -> None:
    """False failure: none: seeded. 4,000 simulated 10-trial experiments with 1% noise per
    trial: the median MDE their A/A intervals give, injected as a true effect, is found in
    74-86% of 4,000 more, the promised 80% give or take 6 points (measured 77.8%: with 10
    trials the median sample SD is a little under the true one, so the median interval
    promises a little more than it delivers; the #30 target is within 10 points), and A/A
    runs are flagged within the 99.9% binomial band of alpha."""
    rng = np.random.default_rng(20261128)
    runs, trials, sd, alpha = 4000, 10, 0.01, 0.05
    low, high, flagged = _paired_t(rng.normal(0.0, sd, (runs, trials)), alpha)
    assert dist.binom_interval(0.999, runs, alpha)[0] <= flagged.sum()
    assert flagged.sum() <= dist.binom_interval(0.999, runs, alpha)[1]
    detectable = float(np.median([mde((lo, hi), alpha) for lo, hi in zip(low, high, strict=True)]))
    _, _, found = _paired_t(rng.normal(detectable, sd, (runs, trials)), alpha)
    assert 0.74 <= found.mean() <= 0.86, (detectable, found.mean())


def test_an_a_a_record_is_calibrated_while_its_count_stays_in_alphas_band() -> None:
    assert binomial_band(20, 0.05) == (0, 3)
    assert aa_record(["no change"] * 17 + ["regression"] * 3, 0.05).calibrated
    over = aa_record(["no change"] * 16 + ["regression", "improvement", "regression", "x"], 0.05)
    assert (over.runs, over.flagged, over.calibrated) == (20, 4, False)
    assert aa_record(["inconclusive"] * 5, 0.05).flagged == 0


def test_without_a_a_runs_the_certificate_says_so_and_keeps_its_mde() -> None:
    cert = certify("cpu", (-0.01, 0.01), 0.05, aa_record([], 0.05))
    assert cert.aa is None and cert.mde == pytest.approx(0.01429, rel=1e-3)
    assert cert.to_json()["aa_history"] is None
    absolute = certify("errors", (-0.002, 0.002), 0.05, None, relative=False)
    assert absolute.to_json()["mde_kind"] == "absolute"
