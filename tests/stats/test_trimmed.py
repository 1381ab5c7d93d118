"""Yuen's trimmed-mean test on per-trial differences: the fallback from 5 trials, which one
outlying trial cannot overturn. Simulations are seeded and vectorised (``per_trial_decision``
is checked equal to the registered models first)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps
from scipy.stats import mstats

from hairline.stats._modelkit import DegenerateDataWarning
from hairline.stats.data import MetricSample
from hairline.stats.models import run_model
from hairline.stats.permutation import per_trial_means
from hairline.stats.selection import fallback_model
from hairline.stats.simulate import in_binomial_band, lab_batches_sample, simulate_lab_batches
from hairline.stats.trialcore import per_trial_decision
from hairline.stats.trimmed import trimmed_t_core, trimmed_t_test
from hairline.stats.verdict import MetricRule, decide

FloatArray = np.ndarray


def trial_means(batches: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per-trial arm means of :func:`simulate_lab_batches` output (mean over the batches)."""
    means = batches.mean(axis=-2)
    return means[..., 0], means[..., 1]


def request_level(
    rng: np.random.Generator, sims: int, trials: int, *, effect_rel: float, outlier: bool
) -> tuple[FloatArray, FloatArray]:
    """Per-trial arm means of skewed per-request data: 2 batches x 40 requests per arm,
    lognormal(0.8) request costs (skewness about 3.7), a 5% trial level both arms share,
    2% batch noise; optionally one batch of B in one trial at 0.75 times its value."""
    shape = (sims, trials, 2, 2)
    level = rng.lognormal(0.0, 0.05, (sims, trials, 1, 1))
    batch = rng.lognormal(0.0, 0.02, shape)
    requests = rng.lognormal(0.0, 0.8, (*shape, 40)).mean(axis=-1)
    values = level * batch * requests
    values[..., 1] *= 1.0 + effect_rel
    if outlier:
        rows = np.arange(sims)
        values[rows, rng.integers(0, trials, sims), rng.integers(0, 2, sims), 1] *= 0.75
    return trial_means(values)


def test_statistic_is_the_trimmed_mean_over_its_winsorised_standard_error() -> None:
    d = np.array([0.031, -0.012, 0.054, 0.008, 0.022, -0.140, 0.019, 0.027, 0.041, 0.015])
    core = trimmed_t_core(d, 0.05)
    g, h = 2, 6
    assert core.trimmed == g
    assert float(core.estimate) == pytest.approx(sps.trim_mean(d, 0.2))
    winsorised_var = float(np.var(np.asarray(mstats.winsorize(d, limits=(0.2, 0.2))), ddof=1))
    assert float(core.se) == pytest.approx(math.sqrt(9 * winsorised_var / (h * (h - 1))))
    lo, hi = core.ci
    assert float(lo) < float(core.estimate) < float(hi)


def test_without_trimming_it_is_the_one_sample_t_test_on_relative_differences() -> None:
    d = np.array([0.02, 0.035, -0.01, 0.04])
    core = trimmed_t_core(d, 0.05)
    reference = sps.ttest_1samp(d, 0.0)
    assert core.trimmed == 0
    assert float(core.p_value) == pytest.approx(reference.pvalue, rel=1e-12)
    ci = reference.confidence_interval(0.95)
    assert (float(core.ci[0]), float(core.ci[1])) == pytest.approx((ci.low, ci.high))


@pytest.mark.parametrize("trials", [5, 7, 10])
def test_calibrated_null_holds_alpha_where_yuens_t_approximation_does_not(trials: int) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margin is the
    check's own: a correct model falls outside the 99.9% binomial band for about 1 seed in 1,000, so
    another seed, or a numpy that changes its streams, could fail it that often; this seed's
    distance from the band is not recorded. Two band checks per case; Yuen's rate at alpha 1% is 1.2
    to 1.5 times alpha (docs/stats.md), many sd of 20,000 draws above the band."""
    rng = np.random.default_rng(40 + trials)
    sims = 20_000
    d = rng.standard_normal((sims, trials))
    for alpha in (0.05, 0.01):
        hits = int(np.count_nonzero(trimmed_t_core(d, alpha).p_value < alpha))
        assert in_binomial_band(hits, sims, alpha), (alpha, hits / sims)
    # Referring T to t(h - 1), as Yuen does, rejects too often with a lab's few trials.
    core = trimmed_t_core(d, 0.05)
    h = trials - 2 * core.trimmed
    yuen = 2 * sps.t.sf(np.abs(core.estimate / core.se), h - 1)
    assert not in_binomial_band(int(np.count_nonzero(yuen < 0.01)), sims, 0.01)


def test_six_trials_that_agree_are_a_regression_despite_one_bad_batch() -> None:
    """False failure: none: one seeded experiment, the same on every run. The paired t and the sign
    flips miss it by construction, but not by far: one trial near -7% beside six near +6% puts the
    paired t's p near 0.07 by hand (not recorded for this seed)."""
    # The case seen at 4,000 req/s: six of seven trials at about +6%, and one trial with a
    # batch of B 25% below every other. Sign flips and the paired t-test give that one trial
    # full weight and miss the regression; the trimmed test drops it.
    rng = np.random.default_rng(6)
    batches = simulate_lab_batches(
        rng, experiments=1, trials=7, effect_rel=0.06, trial_sd=0.03, batch_sd=0.005
    )[0]
    batches[3, 1, 1] *= 0.75
    sample = lab_batches_sample(batches)
    rule = MetricRule(threshold=0.01)
    found = {
        name: decide(run_model(name, sample, rng=np.random.default_rng(0)), rule)
        for name in ("trimmed-t-none", "paired-t-none", "permutation-none")
    }
    assert found["trimmed-t-none"].label == "regression"
    assert found["trimmed-t-none"].comparison.ci_rel[0] > 0.04
    assert found["paired-t-none"].comparison.p_value > 0.05
    assert found["permutation-none"].comparison.p_value > 0.05
    assert fallback_model(sample) == "trimmed-t-none"


@pytest.mark.parametrize("outlier", [False, True])
@pytest.mark.parametrize("trials", [5, 7, 10, 15])
def test_false_positive_rate_holds_on_skewed_requests_with_and_without_a_bad_batch(
    trials: int, outlier: bool
) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margin is the
    check's own: a correct model falls outside the 99.9% binomial band for about 1 seed in 1,000, so
    another seed, or a numpy that changes its streams, could fail it that often; this seed's
    distance from the band is not recorded."""
    rng = np.random.default_rng(1000 * trials + outlier)
    sims = 2000
    means_a, means_b = request_level(rng, sims, trials, effect_rel=0.0, outlier=outlier)
    p = per_trial_decision("trimmed-t-none", means_a, means_b, 0.05).p_value
    hits = int(np.count_nonzero(p < 0.05))
    assert in_binomial_band(hits, sims, 0.05), hits / sims


def sign_flip_p(differences: FloatArray) -> FloatArray:
    """Exact two-sided sign-flip p-values, one per row (the permutation model's test)."""
    m = differences.shape[-1]
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=m)))
    observed = np.abs(differences.mean(axis=-1))
    flipped = np.abs(differences @ signs.T / m)
    return np.mean(flipped >= observed[:, None] * (1 - 1e-12), axis=-1)


@pytest.mark.parametrize("trials", [7, 10])
def test_with_one_bad_batch_it_finds_more_than_sign_flips_and_the_paired_t(trials: int) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margin is thin at
    7 trials: the robust bench (the same simulation, docs/stats.md) found 18.6% against 0.4% and
    0.3%, 3.2 points above the 0.15 bound, about 2.6 sd of 1,000 simulations (1.2 points), so about
    1 seed in 200 would fail it; at 10 trials 37.2% against 4.4%, far from it."""
    rng = np.random.default_rng(77 + trials)
    sims = 1000
    batches = simulate_lab_batches(
        rng, experiments=sims, trials=trials, effect_rel=0.03, outlier="against"
    )
    means_a, means_b = trial_means(batches)
    power = {
        "trimmed": np.mean(per_trial_decision("trimmed-t-none", means_a, means_b, 0.05).p_value
                           < 0.05),
        "paired": np.mean(per_trial_decision("paired-t-none", means_a, means_b, 0.05).p_value
                          < 0.05),
        "sign-flip": np.mean(sign_flip_p(means_b - means_a) < 0.05),
    }  # fmt: skip
    assert power["trimmed"] > power["paired"] + 0.15, power
    assert power["trimmed"] > power["sign-flip"] + 0.15, power


@pytest.mark.parametrize("trials", [5, 7, 12])
def test_interval_covers_the_true_effect_at_its_nominal_rate(trials: int) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margin is the
    check's own: a correct model falls outside the 99.9% binomial band for about 1 seed in 1,000, so
    another seed, or a numpy that changes its streams, could fail it that often; this seed's
    distance from the band is not recorded."""
    rng = np.random.default_rng(300 + trials)
    sims = 2000
    means_a, means_b = request_level(rng, sims, trials, effect_rel=0.03, outlier=False)
    lo, hi = per_trial_decision("trimmed-t-none", means_a, means_b, 0.05).ci_rel
    covered = int(np.count_nonzero((lo <= 0.03) & (hi >= 0.03)))
    assert in_binomial_band(covered, sims, 0.95), covered / sims


@pytest.mark.parametrize("name", ["trimmed-t-none", "paired-t-none"])
@pytest.mark.parametrize("trials", [2, 4, 5, 9, 12])
def test_array_form_reports_what_the_registered_model_reports(name: str, trials: int) -> None:
    rng = np.random.default_rng(trials)
    for _ in range(5):
        batches = simulate_lab_batches(rng, experiments=1, trials=trials, effect_rel=0.02)[0]
        sample = lab_batches_sample(batches)
        result = run_model(name, sample, rng=rng)
        _, means_a, means_b = per_trial_means(sample)
        array = per_trial_decision(name, means_a, means_b, 0.05)
        assert float(array.p_value) == pytest.approx(result.p_value, rel=1e-12, abs=0)
        assert float(array.effect_rel) == pytest.approx(result.effect_rel, rel=1e-12)
        assert (float(array.ci_rel[0]), float(array.ci_rel[1])) == pytest.approx(
            result.ci_rel, rel=1e-12
        )


def test_zero_baselines_fall_back_to_absolute_differences() -> None:
    # Error rates: A is 0 in some trials, so B/A - 1 does not exist; the shift does.
    a = [0.0, 0.01, 0.0, 0.02, 0.0, 0.01]
    b = [0.03, 0.05, 0.04, 0.06, 0.02, 0.05]
    sample = MetricSample.from_arrays(
        np.c_[a, b].ravel(), np.tile([0, 1], 6), trial=np.repeat(np.arange(6), 2)
    )
    result = trimmed_t_test(sample)
    assert result.details["relative"] == 0.0
    assert result.p_value < 0.05
    assert result.ci_abs[0] > 0.0


def test_degenerate_inputs_are_nan_with_a_warning() -> None:
    one = MetricSample.from_arrays([1.0, 2.0], [0, 1], trial=[0, 0])
    with pytest.warns(DegenerateDataWarning, match="at least 2 trials"):
        assert math.isnan(trimmed_t_test(one).p_value)
    same = MetricSample.from_arrays([10.0, 11.0] * 6, [0, 1] * 6, trial=np.repeat(np.arange(6), 2))
    with pytest.warns(DegenerateDataWarning, match="no spread"):
        assert math.isnan(trimmed_t_test(same).p_value)
    equal = MetricSample.from_arrays([10.0] * 12, [0, 1] * 6, trial=np.repeat(np.arange(6), 2))
    assert trimmed_t_test(equal).p_value == 1.0
    with pytest.raises(ValueError, match="trim must be"):
        trimmed_t_test(equal, trim=0.5)
