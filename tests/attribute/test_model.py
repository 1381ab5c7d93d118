"""attribute(): the quantile coefficients of a known generating process, recovered within
their intervals, and intervals that cover at their nominal rate.

The generating process is written as each treatment's quantile function, so its true
quantile coefficients are known in closed form. With ``E(u) = -ln(1 - u)`` (the standard
exponential's quantiles), ``t(u) = max(0, E(u) - E(0.9))`` (zero below p90), ``a`` the
"cpu" factor (0 for "low", 1 for "high") and ``b`` the "pause" factor (0 "off", 1 "on"),
a request of a treatment draws ``u`` uniform and takes the latency::

    Q(u) = 500 + 100 a + 50 E(u) + (80 b + 40 a b) t(u)

so cpu shifts every quantile, pause moves only the tail above p90, and the two interact
there. With the -1/2, +1/2 coding the coefficients at quantile q are:

    cpu = 100 + 20 t(q),  pause = 100 t(q),  cpu:pause = 40 t(q).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hairline.attribute.model import attribute
from hairline.errors import ConfigError, DataError

FACTORS = {"cpu": ("low", "high"), "pause": ("off", "on")}
TREATMENTS = [{"cpu": c, "pause": p} for c in FACTORS["cpu"] for p in FACTORS["pause"]]


def tail(q: float) -> float:
    return max(0.0, -math.log1p(-q) + math.log1p(-0.9))


def truth(q: float) -> dict[str, float]:
    return {"cpu": 100 + 20 * tail(q), "pause": 100 * tail(q), "cpu:pause": 40 * tail(q)}


def simulate(seed: int, *, runs_per_treatment: int = 6, requests_per_run: int = 250):
    rng = np.random.default_rng(seed)
    run_levels = [t for t in TREATMENTS for _ in range(runs_per_treatment)]
    run_of = np.repeat(np.arange(len(run_levels)), requests_per_run)
    a = np.array([r["cpu"] == "high" for r in run_levels], dtype=float)[run_of]
    b = np.array([r["pause"] == "on" for r in run_levels], dtype=float)[run_of]
    u = rng.random(run_of.size)
    exponential = -np.log1p(-u)
    beyond_p90 = np.maximum(0.0, exponential + math.log1p(-0.9))
    latency = 500 + 100 * a + 50 * exponential + (80 * b + 40 * a * b) * beyond_p90
    return latency, run_of, run_levels


def test_every_coefficient_lies_in_its_interval_at_p50_and_p99():
    """False failure: none: seeded rngs make every draw the same on every run. This test rests on
    its seed: six coefficients must each lie in a 95% interval, which a fresh seed would miss about
    1 time in 4."""
    latency, run_of, run_levels = simulate(seed=1)
    result = attribute(latency, run_of, run_levels, FACTORS, quantiles=(0.5, 0.99))

    assert (result.runs, result.requests) == (24, 6000)
    for fit in result.quantiles:
        effects = {e.term: e for e in fit.effects}
        assert list(effects) == ["cpu", "pause", "cpu:pause"]
        for term, true in truth(fit.quantile).items():
            assert effects[term].low_us <= true <= effects[term].high_us, (fit.quantile, term)
    p50, p99 = result.quantiles
    # cpu moves the median; pause only the tail, where it takes most of the change.
    assert {e.term: e for e in p50.effects}["cpu"].share > 0.9
    assert max(p99.effects, key=lambda e: e.share).term == "pause"
    assert sum(e.share for e in p99.effects) == pytest.approx(1.0)


def test_the_intervals_cover_the_truth_at_their_nominal_rate_over_200_seeds():
    """False failure: none: seeded rngs make every draw the same on every run. The band [181, 197]
    holds a correct count with 99% probability (the comment), so for six counts another set of seeds
    would fail about 1 time in 17; these seeds' distance from the band is not recorded."""
    covered = {(q, term): 0 for q in (0.5, 0.99) for term in truth(0.5)}
    for seed in range(200):
        latency, run_of, run_levels = simulate(seed)
        result = attribute(latency, run_of, run_levels, FACTORS, quantiles=(0.5, 0.99), seed=seed)
        for fit in result.quantiles:
            for effect in fit.effects:
                true = truth(fit.quantile)[effect.term]
                covered[fit.quantile, effect.term] += effect.low_us <= true <= effect.high_us
    # 95% of 200 is 190; [181, 197] holds a binomial count with 99% probability.
    assert all(181 <= count <= 197 for count in covered.values()), covered


def test_best_is_the_combination_with_the_lowest_predicted_quantile():
    """False failure: none: seeded rngs make every draw the same on every run. The p99.9
    prediction's 5% and the best combination (the other treatments are 100 and more above it) have
    margins not recorded for seed 2."""
    latency, run_of, run_levels = simulate(seed=2)
    result = attribute(latency, run_of, run_levels, FACTORS, quantiles=(0.5, 0.999))

    levels, value = result.best(0.999)
    assert levels == {"cpu": "low", "pause": "off"}
    assert value == pytest.approx(500 + 50 * -math.log1p(-0.999), rel=0.05)
    with pytest.raises(ConfigError, match=r"0\.99 was not analysed"):
        result.best(0.99)


def test_main_effects_only_goes_through_the_regression_and_agrees_with_the_saturated_fit():
    """False failure: none: seeded rngs make every draw the same on every run. The 5-unit tolerance
    has a margin not recorded for seed 3."""
    latency, run_of, run_levels = simulate(seed=3)
    main = attribute(latency, run_of, run_levels, FACTORS, quantiles=(0.5,), interactions=1)
    full = attribute(latency, run_of, run_levels, FACTORS, quantiles=(0.5,), interactions=2)

    (fit,) = main.quantiles
    assert [e.term for e in fit.effects] == ["cpu", "pause"]
    # At p50 the interaction is 0, so dropping it changes the estimates little.
    for reduced, saturated in zip(fit.effects, full.quantiles[0].effects, strict=False):
        assert reduced.estimate_us == pytest.approx(saturated.estimate_us, abs=5.0)
        assert reduced.low_us < reduced.estimate_us < reduced.high_us


def test_a_factor_of_three_levels_is_coded_against_its_first_level():
    """False failure: none: seeded rngs make every draw the same on every run. This test rests on
    its seed: two true effects must each lie in a 95% interval, which a fresh seed would miss about
    1 time in 10."""
    rng = np.random.default_rng(4)
    factors = {"threads": ("2", "4", "8")}
    run_levels = [{"threads": t} for t in factors["threads"] for _ in range(4)]
    run_of = np.repeat(np.arange(len(run_levels)), 200)
    shift = np.array([0.0, 30.0, 70.0])[np.arange(len(run_levels)) // 4][run_of]
    latency = 400 + shift + rng.exponential(20, run_of.size)

    (fit,) = attribute(latency, run_of, run_levels, factors, quantiles=(0.5,)).quantiles
    effects = {e.term: e for e in fit.effects}
    assert list(effects) == ["threads=4", "threads=8"]
    assert effects["threads=4"].low_us <= 30 <= effects["threads=4"].high_us
    assert effects["threads=8"].low_us <= 70 <= effects["threads=8"].high_us
    assert 0 < sum(e.share for e in fit.effects) <= 1.0 + 1e-12


def test_a_factor_with_one_level_is_refused():
    latency, run_of, run_levels = simulate(seed=5)
    with pytest.raises(ConfigError, match="'pause' has 1 level") as error:
        attribute(latency, run_of, run_levels, {"cpu": ("low", "high"), "pause": ("off",)})
    assert "factors.pause" in str(error.value)


def test_an_aliased_design_is_refused_naming_the_terms():
    # A half fraction of 2^3 (c = a * b): c cannot be told apart from the a:b interaction.
    factors = {"a": ("-", "+"), "b": ("-", "+"), "c": ("-", "+")}
    half = [("-", "-", "+"), ("+", "-", "-"), ("-", "+", "-"), ("+", "+", "+")]
    run_levels = [dict(zip("abc", t, strict=True)) for t in half for _ in range(2)]
    run_of = np.repeat(np.arange(len(run_levels)), 50)
    latency = np.random.default_rng(6).exponential(100, run_of.size)

    with pytest.raises(ConfigError, match=r"'a:b' cannot be told apart from c") as error:
        attribute(latency, run_of, run_levels, factors, interactions=2)
    assert "interactions" in str(error.value)
    # Main effects only are estimable from the half fraction (and saturate it).
    fits = attribute(latency, run_of, run_levels, factors, interactions=1, quantiles=(0.5,))
    assert [e.term for e in fits.quantiles[0].effects] == ["a", "b", "c"]


def test_one_run_of_a_treatment_is_too_few_for_the_clustered_bootstrap():
    latency, run_of, run_levels = simulate(seed=7, runs_per_treatment=2)
    keep = run_of != 0
    with pytest.raises(DataError, match="cpu=low, pause=off has 1 run"):
        attribute(latency[keep], run_of[keep] - 1, run_levels[1:], FACTORS)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"quantiles": (0.5, 1.0)}, ConfigError, "strictly between 0 and 1"),
        ({"interactions": 0}, ConfigError, "interactions must be at least 1"),
        ({"bootstrap": 5}, ConfigError, "bootstrap must be at least"),
        ({"confidence": 95}, ConfigError, "confidence"),
    ],
)
def test_bad_settings_name_the_setting(change, error, message):
    latency, run_of, run_levels = simulate(seed=8, runs_per_treatment=2, requests_per_run=20)
    with pytest.raises(error, match=message):
        attribute(latency, run_of, run_levels, FACTORS, **change)


def test_bad_data_is_a_data_error():
    latency, run_of, run_levels = simulate(seed=9, runs_per_treatment=2, requests_per_run=20)
    with pytest.raises(DataError, match="finite"):
        attribute(np.where(run_of == 0, np.nan, latency), run_of, run_levels, FACTORS)
    with pytest.raises(DataError, match="'cpu' to 'medium'"):
        attribute(latency, run_of, [{"cpu": "medium", "pause": "off"}, *run_levels[1:]], FACTORS)
    with pytest.raises(DataError, match=r"run\(s\) \[7\] have no requests"):
        attribute(latency[run_of != 7], run_of[run_of != 7], run_levels, FACTORS)
