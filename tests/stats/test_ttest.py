"""Student's and Welch's t-test: scipy's numbers, the false-positive rate they promise, and
the heavy-tailed case where the sqrt and outlier preprocessings earn their place."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from hairline.stats._modelkit import DegenerateDataWarning
from hairline.stats.data import MetricSample
from hairline.stats.simulate import in_binomial_band
from hairline.stats.ttest import t_test


def sample_of(a: np.ndarray, b: np.ndarray, **columns: object) -> MetricSample:
    arm = np.r_[np.zeros(len(a)), np.ones(len(b))]
    return MetricSample.from_arrays(np.r_[a, b], arm, **columns)  # type: ignore[arg-type]


@pytest.mark.parametrize("equal_var", [True, False])
def test_p_value_and_statistic_match_scipy(equal_var: bool) -> None:
    rng = np.random.default_rng(11)
    a = rng.normal(10.0, 1.0, 30)
    b = rng.normal(10.5, 2.0, 45)
    result = t_test(sample_of(a, b), equal_var=equal_var)
    expected = sps.ttest_ind(b, a, equal_var=equal_var)
    assert result.p_value == pytest.approx(expected.pvalue, rel=1e-10)
    assert result.details["t"] == pytest.approx(expected.statistic, rel=1e-10)
    assert result.effect_abs == pytest.approx(b.mean() - a.mean())
    assert result.effect_rel == pytest.approx(b.mean() / a.mean() - 1.0)
    assert result.ci_rel[0] < result.effect_rel < result.ci_rel[1]
    assert result.model == ("t-test-none" if equal_var else "welch-none")


def test_sqrt_model_reports_in_the_metrics_units() -> None:
    # B is A scaled by 1.21: on the root scale the ratio is 1.1, squared back it is 1.21.
    a = np.random.default_rng(5).lognormal(0.0, 0.5, 200)
    result = t_test(sample_of(a, 1.21 * a), preprocessing="sqrt")
    assert result.effect_rel == pytest.approx(0.21)
    assert result.mean_a == pytest.approx(np.mean(np.sqrt(a)) ** 2)
    assert result.ci_rel[0] < 0.21 < result.ci_rel[1]
    assert result.ci_abs[0] == pytest.approx(result.ci_rel[0] * result.mean_a)


@pytest.mark.parametrize("equal_var", [True, False])
def test_false_positive_rate_holds_on_normal_data(equal_var: bool) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margin is the
    check's own: a correct model falls outside the 99.9% binomial band for about 1 seed in 1,000, so
    another seed, or a numpy that changes its streams, could fail it that often; this seed's
    distance from the band is not recorded."""
    rng = np.random.default_rng(21 + equal_var)
    sims = 1000
    hits = 0
    for _ in range(sims):
        a = rng.normal(50.0, 5.0, 30)
        b = rng.normal(50.0, 5.0 if equal_var else 9.0, 30 if equal_var else 12)
        hits += t_test(sample_of(a, b), equal_var=equal_var).p_value < 0.05
    assert in_binomial_band(hits, sims, 0.05)


def test_student_misleads_where_welch_holds() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margin is the
    check's own: a correct model falls outside the 99.9% binomial band for about 1 seed in 1,000, so
    another seed, or a numpy that changes its streams, could fail it that often; this seed's
    distance from the band is not recorded. Student's rate is far outside it (a 10-row arm with 5
    times the sd), not recorded for this seed."""
    # Small arm with the large variance: Student's pooled variance is too small for it.
    rng = np.random.default_rng(8)
    sims, student, welch = 600, 0, 0
    for _ in range(sims):
        sample = sample_of(rng.normal(50.0, 2.0, 60), rng.normal(50.0, 10.0, 10))
        student += t_test(sample, equal_var=True).p_value < 0.05
        welch += t_test(sample, equal_var=False).p_value < 0.05
    assert not in_binomial_band(student, sims, 0.05)
    assert in_binomial_band(welch, sims, 0.05)


def heavy_tailed_rates(rng: np.random.Generator, effect: float) -> dict[str, float]:
    sims, n = 200, 1000
    rejections = dict.fromkeys(["none", "sqrt", "outlier-elim", "outlier-cap"], 0)
    for _ in range(sims):
        sample = sample_of(rng.lognormal(0.0, 1.5, n), (1 + effect) * rng.lognormal(0.0, 1.5, n))
        for pre in rejections:
            result = t_test(sample, equal_var=False, preprocessing=pre)  # type: ignore[arg-type]
            rejections[pre] += result.p_value < 0.05 and result.effect_rel > 0
    return {pre: hits / sims for pre, hits in rejections.items()}


def test_heavy_tails_sqrt_and_outlier_models_hold_alpha_and_detect_more() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margin is the
    check's own: a correct model falls outside the 99.9% binomial band for about 1 seed in 1,000, so
    another seed, or a numpy that changes its streams, could fail it that often; this seed's
    distance from the band is not recorded. Four band checks of 200 runs each; the power gaps (about
    a third, two thirds, a half: the comment) against bounds of 0.2 and 0.1 are a few binomial sd of
    200 runs (3.4 points), not recorded for this seed."""
    rng = np.random.default_rng(2024)
    # One-sided counts (p < alpha and the effect positive) have rate alpha/2 under A/A.
    fpr = heavy_tailed_rates(rng, 0.0)
    for pre, rate in fpr.items():
        assert in_binomial_band(round(rate * 200), 200, 0.025), (pre, rate)
    # A 20% regression on lognormal(sigma 1.5) requests, 1,000 per arm: none finds about a
    # third, sqrt about two thirds, the outlier models about half.
    power = heavy_tailed_rates(rng, 0.2)
    assert power["sqrt"] > power["none"] + 0.2
    assert power["outlier-cap"] > power["none"] + 0.1
    assert power["outlier-elim"] > power["none"] + 0.1


def test_constant_arms_give_nan_and_a_warning() -> None:
    with pytest.warns(DegenerateDataWarning, match="constant"):
        result = t_test(sample_of(np.full(5, 3.0), np.full(5, 3.0)))
    assert math.isnan(result.p_value) and math.isnan(result.effect_rel)
    assert result.n_a == 5 and result.warnings


def test_one_row_per_arm_gives_nan() -> None:
    with pytest.warns(DegenerateDataWarning, match="at least 2 rows"):
        assert math.isnan(t_test(sample_of(np.ones(1), np.ones(1))).p_value)


def test_pooling_trials_is_flagged() -> None:
    rng = np.random.default_rng(1)
    sample = sample_of(rng.normal(size=20), rng.normal(size=20), trial=np.arange(40) % 4)
    assert any("pools 4 trials" in w for w in t_test(sample).warnings)
