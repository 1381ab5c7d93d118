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
from scipy import special

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


# Run-level variance: each run has its own offset and scale, as a run's host, moment and
# warm-up give it. Requests of one run then share an error, so resampling requests treats
# them as more information than they are; resampling runs does not.
RUN_OFFSET_SD_US = 20.0  # a run's latency is shifted by N(0, 20 us)
RUN_LOG_SCALE_SD = 0.3  # and its variable part scaled by exp(N(0, 0.3))
COVERAGE_QUANTILES = (0.5, 0.99)


def cell_parameters(treatment: dict[str, str]) -> tuple[float, float]:
    """The treatment's fixed part (500 + 100 a) and tail slope (80 b + 40 a b)."""
    a, b = float(treatment["cpu"] == "high"), float(treatment["pause"] == "on")
    return 500 + 100 * a, 80 * b + 40 * a * b


def simulate_with_run_effects(seed: int, *, runs_per_treatment: int = 6,
                              requests_per_run: int = 250):  # fmt: skip
    """As :func:`simulate`, each run's latency ``fixed + offset + scale * (50 E + c t)``."""
    rng = np.random.default_rng(seed)
    run_levels = [t for t in TREATMENTS for _ in range(runs_per_treatment)]
    run_of = np.repeat(np.arange(len(run_levels)), requests_per_run)
    fixed, slope = (np.array([cell_parameters(t)[i] for t in run_levels])[run_of] for i in (0, 1))
    offset = rng.normal(0.0, RUN_OFFSET_SD_US, len(run_levels))[run_of]
    scale = np.exp(rng.normal(0.0, RUN_LOG_SCALE_SD, len(run_levels)))[run_of]
    exponential = -np.log1p(-rng.random(run_of.size))
    variable = 50 * exponential + slope * np.maximum(0.0, exponential + math.log1p(-0.9))
    return fixed + offset + scale * variable, run_of, run_levels


def mixture_quantile(q: float, fixed: float, slope: float) -> float:
    """The q-quantile of a treatment's latency over runs and requests: what its pooled
    sample quantile estimates. Its distribution function averages the request's (inverted
    in closed form) over the run's offset and log-scale (Gauss-Hermite, 60 x 60 nodes);
    bisection inverts it."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(60)
    weights = np.outer(weights, weights) / weights.sum() ** 2
    offsets, scales = RUN_OFFSET_SD_US * nodes[:, None], np.exp(RUN_LOG_SCALE_SD * nodes[None, :])
    knee = 50 * -math.log1p(-0.9)  # the variable part at p90, where the tail term starts

    def cdf(x: float) -> float:
        variable = np.maximum(0.0, (x - fixed - offsets) / scales)
        exponential = np.where(variable < knee, variable / 50, (variable + slope * knee / 50)
                               / (50 + slope))  # fmt: skip
        return float((weights * -np.expm1(-exponential)).sum())

    low, high = fixed - 10 * RUN_OFFSET_SD_US, fixed + 10_000.0
    for _ in range(80):
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) < q else (low, middle)
    return (low + high) / 2


def mixture_truth() -> dict[float, dict[str, float]]:
    """The coefficients of the treatments' mixture quantiles in the -1/2, +1/2 coding."""
    codes = np.array([[1.0, a, b, a * b] for a in (-0.5, 0.5) for b in (-0.5, 0.5)])
    truth = {}
    for q in COVERAGE_QUANTILES:
        cells = [mixture_quantile(q, *cell_parameters(t)) for t in TREATMENTS]
        coefficients = np.linalg.solve(codes, cells)
        truth[q] = dict(zip(("cpu", "pause", "cpu:pause"), coefficients[1:], strict=True))
    return truth


def per_request_intervals(latency, run_of, run_levels, rng, *, replicates: int = 200):
    """The naive bootstrap: requests resampled within each treatment, as if independent,
    percentile intervals at 95%. Drawn exactly rather than by resampling: the resample's
    quantile is at most the k-th smallest value when Binomial(n, k/n) of its n draws are,
    which is at least m = ceil(q n) (this drew the same coverage as resampling did)."""
    codes = np.array([[1.0, a, b, a * b] for a in (-0.5, 0.5) for b in (-0.5, 0.5)])
    treatment_of_run = np.array([TREATMENTS.index(levels) for levels in run_levels])
    intervals = {}
    for q in COVERAGE_QUANTILES:
        cells = []
        for t in range(len(TREATMENTS)):
            values = np.sort(latency[treatment_of_run[run_of] == t])
            n, m = values.size, math.ceil(q * values.size)
            at_or_below = special.bdtrc(m - 1, n, np.arange(1, n + 1) / n)
            cells.append(values[np.minimum(np.searchsorted(at_or_below, rng.random(replicates)),
                                           n - 1)])  # fmt: skip
        coefficients = np.linalg.solve(codes, np.array(cells))
        low, high = np.quantile(coefficients, [0.025, 0.975], axis=1)
        for j, term in enumerate(("cpu", "pause", "cpu:pause"), start=1):
            intervals[q, term] = (low[j], high[j])
    return intervals


def coverage_counts(seeds, truth):
    """Per (quantile, term), how many of the seeds' designs had the true coefficient in the
    run-clustered interval, and in the per-request one (bench/attribute/coverage.py runs
    this over more seeds)."""
    clustered = {(q, term): 0 for q in COVERAGE_QUANTILES for term in truth[q]}
    naive = dict(clustered)
    for seed in seeds:
        latency, run_of, run_levels = simulate_with_run_effects(seed)
        result = attribute(latency, run_of, run_levels, FACTORS, quantiles=COVERAGE_QUANTILES,
                           seed=seed)  # fmt: skip
        for fit in result.quantiles:
            for effect in fit.effects:
                true = truth[fit.quantile][effect.term]
                clustered[fit.quantile, effect.term] += effect.low_us <= true <= effect.high_us
        rng = np.random.default_rng(1_000_000 + seed)
        for key, (low, high) in per_request_intervals(latency, run_of, run_levels, rng).items():
            naive[key] += low <= truth[key[0]][key[1]] <= high
    return clustered, naive


def test_with_run_level_variance_runs_must_be_resampled_not_requests():
    """Each run has its own offset and scale, so requests of a run are not independent.
    Over 200 seeded designs (4 treatments x 6 runs x 250 requests), the run-clustered 95%
    intervals cover the true coefficients at their nominal rate; the naive per-request
    bootstrap's cover far less: at p50, where the run offset is most of the error, about
    1 in 4. Here (seeds 0-199): clustered 184-193 of 200 for the six (quantile, term)
    pairs, per-request 46-52 at p50 and 152-157 at p99. Over seeds 200-1199
    (bench/attribute/coverage.py): clustered 93.9-96.2%, per-request 20.3-21.5% at p50 and
    70.0-72.8% at p99.

    False failure: 6.4e-4 for fresh seeds. With coverage at its nominal 95%, a count of
    200 falls outside [177, 199] with probability 1.07e-4 (binomial), and six of them
    with at most 6 x 1.07e-4 (Bonferroni). At the lowest rate measured, 93.9%, one count
    would fall below 177 with probability 1.3e-3: a method 1 point short of nominal. The
    per-request counts reach 177 with probability below 1e-7 at 73% (the p99 rate measured)
    and far less at p50. These seeds are fixed, so the outcome itself repeats."""
    truth = mixture_truth()
    # A fixed shift of 100 moves the mixture's median by 100 too; the tail slope starts
    # above p90, so pause moves the median only where a run's scale carries p90 below it.
    assert truth[0.5]["cpu"] == pytest.approx(100.0, abs=0.1), truth
    assert truth[0.5]["pause"] == pytest.approx(0.0, abs=0.1), truth
    assert truth[0.99]["pause"] > 100.0, truth
    clustered, naive = coverage_counts(range(200), truth)
    assert all(177 <= count <= 199 for count in clustered.values()), clustered
    assert all(count < 177 for count in naive.values()), naive
    assert max(naive[0.5, term] for term in truth[0.5]) < 100, naive
