"""The sequential design: one calibrated level at every look keeps the whole procedure's
false-positive rate at alpha, also with skewed requests and an outlying batch."""

from __future__ import annotations

import numpy as np
import pytest

from hairline.stats.models import run_model
from hairline.stats.selection import fallback_model
from hairline.stats.sequential import (
    FIRST_LOOK,
    look_alpha,
    looks,
    sequential_outcomes,
    settled,
    should_stop,
)
from hairline.stats.simulate import (
    Outlier,
    in_binomial_band,
    lab_batches_sample,
    simulate_lab_batches,
)
from hairline.stats.trialcore import per_trial_decision
from hairline.stats.verdict import MetricRule, decide

FloatArray = np.ndarray


def skewed_lab(
    rng: np.random.Generator, experiments: int, trials: int, *, effect_rel: float, outlier: Outlier
) -> tuple[FloatArray, FloatArray]:
    """Per-trial arm means of skewed per-request data (lognormal(0.8) costs, 30 requests per
    batch) on the lab's two swapped CPU sets, with an optional outlying batch."""
    batches = simulate_lab_batches(
        rng, experiments=experiments, trials=trials, effect_rel=effect_rel, batch_sd=0.02,
        outlier=outlier,
    )  # fmt: skip
    requests = rng.lognormal(-0.32, 0.8, (*batches.shape, 30)).mean(axis=-1)
    means = (batches * requests).mean(axis=-2)
    return means[..., 0], means[..., 1]


def test_the_level_lies_between_bonferroni_and_alpha() -> None:
    assert look_alpha(0.05, 7, 7) == 0.05
    for first, last in ((3, 7), (3, 15), (5, 12)):
        count = len(looks(first, last))
        level = look_alpha(0.05, first, last)
        assert 0.05 / count < level < 0.05
    assert look_alpha(0.05, 3, 15) < look_alpha(0.05, 3, 10) < look_alpha(0.05, 3, 5)
    # No per-trial form to simulate: Bonferroni, valid for any statistic.
    assert look_alpha(0.05, 3, 15, "permutation-none") == pytest.approx(0.05 / 13)
    assert look_alpha(0.05, 3, 15, "paired-t-sqrt") == look_alpha(0.05, 3, 15, "paired-t-none")


def test_bad_designs_name_the_fix() -> None:
    with pytest.raises(ValueError, match="at least 2 trials"):
        look_alpha(0.05, 1, 10)
    with pytest.raises(ValueError, match="max_trials must be"):
        looks(5, 4)
    with pytest.raises(ValueError, match="unknown model"):
        look_alpha(0.05, 3, 10, "trimmed")


def test_looking_at_alpha_every_time_is_what_the_calibration_prevents() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margin is the
    check's own: a correct model falls outside the 99.9% binomial band for about 1 seed in 1,000, so
    another seed, or a numpy that changes its streams, could fail it that often; this seed's
    distance from the band is not recorded. Looking at 5% every time flags about 20.7%
    (bench/RESULTS.md's sequential bench) against the bound of 0.15, about 9 sd of 4,000
    experiments."""
    rng = np.random.default_rng(1)
    sims, last = 4000, 15
    means_b = 1.0 + 0.01 * rng.standard_normal((sims, last))
    means_a = np.ones_like(means_b)
    naive = np.zeros(sims, dtype=bool)
    for n in looks(FIRST_LOOK, last):
        model = fallback_model_for(n)
        naive |= per_trial_decision(model, means_a[:, :n], means_b[:, :n], 0.05).p_value < 0.05
    assert naive.mean() > 0.15
    found = sequential_outcomes(means_a, means_b, threshold=0.0)
    assert in_binomial_band(round((found.regression + found.improvement) * sims), sims, 0.05)


def fallback_model_for(trials: int) -> str:
    sample = lab_batches_sample(np.ones((trials, 2, 2)))
    return fallback_model(sample)


@pytest.mark.parametrize("outlier", ["none", "against", "random"])
def test_false_positive_rate_of_the_whole_procedure_holds_alpha(outlier: Outlier) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margin is the
    check's own: a correct model falls outside the 99.9% binomial band for about 1 seed in 1,000, so
    another seed, or a numpy that changes its streams, could fail it that often; this seed's
    distance from the band is not recorded. The level itself comes from a seeded calibration with a
    Monte Carlo error of about 0.15 points (docs/stats.md)."""
    # Without a threshold only a significant look stops an A/A experiment, so the rate of
    # false regressions and improvements is the family-wise rate the level is calibrated
    # for. With a threshold, "no change" also stops it and a false alarm must also be at
    # least the threshold: the rate can only be lower.
    rng = np.random.default_rng(sum(map(ord, outlier)))
    sims = 3000
    means_a, means_b = skewed_lab(rng, sims, 15, effect_rel=0.0, outlier=outlier)
    plain = sequential_outcomes(means_a, means_b, threshold=0.0)
    hits = round((plain.regression + plain.improvement) * sims)
    assert in_binomial_band(hits, sims, 0.05), hits / sims
    gated = sequential_outcomes(means_a, means_b, threshold=0.01)
    assert gated.regression + gated.improvement <= plain.regression + plain.improvement


def test_the_array_procedure_is_the_lab_path_of_models_and_verdicts() -> None:
    """False failure: none: seeded; the two paths compute the same thing, so they agree for any
    draw."""
    # Per look: the fallback model on the trials so far at the look's level, the verdict
    # rule, stop when settled; the same ends and stopping trials as sequential_outcomes.
    rng = np.random.default_rng(12)
    experiments, last = 24, 10
    batches = simulate_lab_batches(
        rng, experiments=experiments, trials=last, effect_rel=0.02, batch_sd=0.01,
        outlier="against",
    )  # fmt: skip
    means = batches.mean(axis=-2)
    found = sequential_outcomes(means[..., 0], means[..., 1], threshold=0.01)
    level = look_alpha(0.05, FIRST_LOOK, last)
    rule = MetricRule(threshold=0.01)
    labels = {"regression": 0, "improvement": 0, "no change": 0}
    for e in range(experiments):
        stop = last
        for n in looks(FIRST_LOOK, last):
            sample = lab_batches_sample(batches[e, :n])
            comparison = run_model(
                fallback_model(sample), sample, rng=np.random.default_rng(0), alpha=level
            )
            verdict = decide(comparison, rule)
            if settled(verdict):
                labels[verdict.label] += 1
                stop = n
                break
        assert found.trials[e] == stop, e
    assert labels["regression"] / experiments == pytest.approx(found.regression)
    assert labels["no change"] / experiments == pytest.approx(found.no_change)


def test_power_and_expected_trials_for_a_regression_at_and_beyond_the_threshold() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The bounds bracket
    the docs/stats.md table this reproduces; their distance from it for this seed is not recorded
    (2,000 experiments give a binomial sd near 1 point at 0.7)."""
    # Per-trial differences with a spread of half the threshold (sd/threshold 0.5), looks
    # at 3 to 15 trials: docs/stats.md has the table this reproduces.
    rng = np.random.default_rng(2)
    sims, theta = 2000, 0.01
    noise = 0.5 * theta * rng.standard_normal((sims, 15))
    ones = np.ones_like(noise)
    at_threshold = sequential_outcomes(ones, 1.0 + theta + noise, threshold=theta)
    twice = sequential_outcomes(ones, 1.0 + 2 * theta + noise, threshold=theta)
    aa = sequential_outcomes(ones, 1.0 + noise, threshold=theta)
    # A regression of exactly the threshold is flagged when its estimate reaches it: the
    # looks give it several chances, so more than half the time, never all of it.
    assert 0.6 < at_threshold.regression < 0.85
    assert twice.regression > 0.99 and twice.mean_trials < 5
    assert aa.no_change > 0.99 and aa.mean_trials < 9


def test_settled_and_should_stop() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The loose verdict
    must be 'no change' (p >= 0.05 with no effect): a fresh seed would fail it about 1 time in 20,
    so this test rests on its seed."""
    assert settled("regression") and settled("no change") and not settled("inconclusive")
    rng = np.random.default_rng(3)
    sample = lab_batches_sample(simulate_lab_batches(rng, experiments=1, trials=6)[0])
    comparison = run_model("trimmed-t-none", sample, rng=rng)
    # Without a threshold "no change" only means p >= alpha: more trials could overturn it.
    loose = decide(comparison, MetricRule(threshold=0.0))
    assert loose.label == "no change" and not settled(loose)
    assert should_stop([loose], 6, 6) and not should_stop([loose], 5, 6)
    assert not should_stop([], 3, 6)
    assert should_stop(["regression", "no change"], 4, 6)
