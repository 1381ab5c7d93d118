"""stats/dist gives the values scipy.stats gives, over the ranges hairline asks for (the
tests import scipy.stats; the package does not)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import signal, stats

from hairline.stats import dist

QS = np.array([1e-9, 0.001, 0.025, 0.05, 0.2, 0.5, 0.8, 0.95, 0.975, 0.999, 1 - 1e-9])


@pytest.mark.parametrize("df", [1, 2, 3, 4.5, 9, 30, 1000, math.inf])
def test_t_quantiles_and_tails_are_scipys(df: float) -> None:
    assert np.allclose(dist.t_ppf(QS, df), stats.t.ppf(QS, df), rtol=1e-10)
    xs = np.array([0.0, 0.3, 1.0, 2.0, 4.3, 12.0, 60.0, math.inf])
    assert np.allclose(dist.t_sf(xs, df), stats.t.sf(xs, df), rtol=1e-10, atol=1e-300)


def test_t_broadcasts_over_degrees_of_freedom_and_keeps_nan() -> None:
    df = np.array([1.0, 2.0, 5.0, 0.0, math.nan])
    with np.errstate(invalid="ignore"):
        ours, theirs = dist.t_ppf(0.975, df), stats.t.ppf(0.975, df)
    assert np.allclose(ours[:3], theirs[:3]) and np.isnan(ours[3:]).all()
    assert isinstance(dist.t_ppf(0.975, 4), float)


def test_normal_functions_are_scipys() -> None:
    xs = np.linspace(-9, 9, 37)
    assert np.allclose(dist.norm_ppf(QS), stats.norm.ppf(QS), rtol=1e-12)
    assert np.allclose(dist.norm_cdf(xs), stats.norm.cdf(xs), rtol=1e-12, atol=1e-300)
    assert np.allclose(dist.norm_sf(xs), stats.norm.sf(xs), rtol=1e-12, atol=1e-300)
    assert np.allclose(dist.norm_pdf(xs), stats.norm.pdf(xs), rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("df", [1, 2, 5, 29])
@pytest.mark.parametrize("nc", [0.0, 0.5, 2.8, 6.0])
def test_noncentral_t_is_scipys(df: int, nc: float) -> None:
    xs = np.array([-4.3, -2.0, 0.0, 1.0, 2.8, 4.3, 10.0])
    assert np.allclose(dist.nct_cdf(xs, df, nc), stats.nct.cdf(xs, df, nc), atol=1e-9)
    assert np.allclose(dist.nct_sf(xs, df, nc), stats.nct.sf(xs, df, nc), atol=1e-9)


@pytest.mark.parametrize(
    ("q", "a", "b"), [(0.95, 1, 20), (0.95, 4, 17), (0.5, 2.5, 3), (0.01, 9, 2)]
)
def test_beta_quantile_is_scipys(q: float, a: float, b: float) -> None:
    assert dist.beta_ppf(q, a, b) == pytest.approx(stats.beta.ppf(q, a, b), rel=1e-10)


@pytest.mark.parametrize("n", [1, 5, 20, 200, 5000])
@pytest.mark.parametrize("p", [0.0005, 0.05, 0.5, 0.95])
def test_binomial_tail_quantile_and_interval_are_scipys(n: int, p: float) -> None:
    for k in (-1, 0, 1, n // 3, n - 1, n):
        assert dist.binom_sf(k, n, p) == pytest.approx(stats.binom.sf(k, n, p), abs=1e-10)
    for q in (0.0005, 0.025, 0.5, 0.975, 0.9995):
        assert dist.binom_ppf(q, n, p) == stats.binom.ppf(q, n, p), (q, n, p)
    for confidence in (0.95, 0.999):
        expected = tuple(stats.binom.interval(confidence, n, p))
        assert dist.binom_interval(confidence, n, p) == expected


def test_skew_is_scipys_biased_skew() -> None:
    rng = np.random.default_rng(7)
    for values in (rng.exponential(size=50), rng.normal(size=7), np.array([1.0, 2.0, 10.0])):
        assert dist.skew(values) == pytest.approx(stats.skew(values, bias=True), rel=1e-12)
    assert math.isnan(dist.skew(np.ones(5)))


@pytest.mark.parametrize("span", [1, 2, 10, 200, 5000])
def test_the_moving_average_filter_is_lfilters(span: int) -> None:
    """Over several blocks (200,000 values at span 10 is 68 blocks of 2,900)."""
    a = 2.0 / (span + 1.0)
    x = np.random.default_rng(span).lognormal(5, 1, size=200_000)
    expected = signal.lfilter([a], [1.0, -(1.0 - a)], x)
    assert np.allclose(dist.ema_filter(x, a), expected, rtol=1e-9)
    assert dist.ema_filter(np.array([]), a).size == 0
    with pytest.raises(ValueError, match="smoothing"):
        dist.ema_filter(x, 0.0)
