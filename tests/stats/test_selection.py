"""Adaptive model selection from A/A runs and artificial A/B runs, and the fallback model."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from hairline.stats.data import MetricSample
from hairline.stats.selection import (
    evaluate_model,
    fallback_model,
    inject_regression,
    select_model,
)


def single_trial_run(rng: np.random.Generator) -> MetricSample:
    n = 200
    return MetricSample.from_arrays(rng.normal(100.0, 10.0, 2 * n), np.repeat([0, 1], n))


def multi_trial_run(rng: np.random.Generator) -> MetricSample:
    """Eight trials; each arm of each trial drifts on its own, so rows are not independent."""
    count, rows = 8, 25
    trial = np.repeat(np.arange(count), 2 * rows)
    arm = np.tile(np.repeat([0, 1], rows), count)
    drift = rng.normal(0.0, 2.0, 2 * count)[2 * trial + arm]
    value = 100.0 + rng.normal(0.0, 4.0, count)[trial] + drift + rng.normal(0.0, 5.0, len(trial))
    return MetricSample.from_arrays(value, arm, trial=trial)


def test_injection_scales_arm_b_only() -> None:
    sample = MetricSample.from_arrays([10.0, 10.0, 20.0, 20.0], [0, 0, 1, 1])
    assert inject_regression(sample, 0.05).value.tolist() == [10.0, 10.0, 21.0, 21.0]
    with pytest.raises(ValueError, match="above -1"):
        inject_regression(sample, -1.5)


def test_fpr_estimates_are_in_band_and_mde_follows_bloom() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margin is the
    check's own: a correct model falls outside the 99.9% binomial band for about 1 seed in 1,000, so
    another seed, or a numpy that changes its streams, could fail it that often; this seed's
    distance from the band is not recorded. The FNR range 0.08 to 0.35 around about 20% of 150 runs
    is 2.6 to 3.6 binomial sd (3.3 points), and the MDE's 10% is not recorded for this seed."""
    rng = np.random.default_rng(31)
    runs = [single_trial_run(rng) for _ in range(150)]
    score = evaluate_model("welch-none", runs, rng=rng, injected_rel=0.03)
    lo, hi = sps.binom.interval(0.999, 150, 0.05)
    assert lo <= score.false_positives <= hi
    assert score.fpr_consistent
    # SE of the relative difference is sqrt(2)·10/sqrt(200)/100 = 0.01; MDE ≈ 2.8 SE.
    assert score.mde_rel == pytest.approx(2.8 * 0.01, rel=0.1)
    # A 3% regression is about the MDE: found roughly 80% of the time (FNR near 20%).
    assert 0.08 <= score.fnr <= 0.35


def test_single_trial_runs_select_a_t_test() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. Which model wins, and
    the band checks of 40 runs, have margins not recorded for this seed."""
    rng = np.random.default_rng(2)
    runs = [single_trial_run(rng) for _ in range(40)]
    selection = select_model(runs, rng=rng, injected_rel=0.02)
    assert selection.best is not None
    assert selection.best.startswith(("t-test", "welch"))
    permutation = selection.score("permutation-none")
    assert not permutation.applicable and "trial" in (permutation.reason or "")
    for name in ("t-test-none", "welch-none"):
        assert selection.score(name).fpr_consistent


def test_multi_trial_runs_reject_the_pooled_t_test() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. Which model wins, and
    the band checks of 40 runs, have margins not recorded for this seed."""
    rng = np.random.default_rng(4)
    runs = [multi_trial_run(rng) for _ in range(40)]
    selection = select_model(runs, rng=rng, injected_rel=0.05)
    assert not selection.score("t-test-none").fpr_consistent
    assert selection.score("permutation-none").fpr_consistent
    assert selection.best in ("permutation-none", "permutation-sqrt", "ci-test")
    assert selection.best in selection.reason


def test_no_eligible_model_is_reported_not_guessed() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The pooled t-test is
    out of band by a wide margin on drifting trials
    (test_multi_trial_runs_reject_the_pooled_t_test), not recorded for this seed."""
    rng = np.random.default_rng(4)
    runs = [multi_trial_run(rng) for _ in range(30)]
    selection = select_model(runs, rng=rng, models=["t-test-none"], injected_rel=0.05)
    assert selection.best is None
    assert "no model" in selection.reason


@pytest.mark.filterwarnings("ignore::hairline.stats._modelkit.DegenerateDataWarning")
def test_a_metric_that_is_zero_in_the_baseline_is_scored_not_applicable_not_raised() -> None:
    """An error rate of a healthy service: 0 in every run. The ci-test has no relative
    difference to learn from; before, its ValueError failed every experiment of a service
    with two A/A runs ("internal error: history run 0 has a baseline mean of 0"). No
    statistics: the values are constant."""
    zero = MetricSample.from_arrays(np.zeros(8), np.repeat([0, 1], 4), trial=np.tile([0, 1], 4))
    rng = np.random.default_rng(5)
    score = evaluate_model("ci-test", [zero, zero, zero], rng=rng)
    assert not score.applicable and "baseline mean of 0" in (score.reason or "")
    selection = select_model([zero, zero, zero], rng=rng)  # no exception
    assert "ci-test" in {s.model for s in selection.scores if not s.applicable}


def test_selection_validates_its_input() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="at least 2 A/A runs"):
        select_model([single_trial_run(rng)], rng=rng)
    with pytest.raises(ValueError, match="unknown model"):
        select_model([single_trial_run(rng)] * 3, rng=rng, models=["nope"])


def test_host_bootstraps_are_candidates_only_where_the_fallback_would_take_one() -> None:
    """A local lab's two CPU sets are two clusters: resampled, they say almost nothing about
    the spread, and a short A/A history cannot show that before the model wins on power."""
    rng = np.random.default_rng(11)
    count, rows = 6, 40
    trial = np.repeat(np.arange(count), 2 * rows)
    arm = np.tile(np.repeat([0, 1], rows), count)

    def runs(hosts: np.ndarray) -> list[MetricSample]:
        return [
            MetricSample.from_arrays(
                rng.normal(100.0, 5.0, len(trial)), arm, trial=trial, host=hosts
            )
            for _ in range(4)
        ]

    two = (arm + trial) % 2  # each arm on each CPU set in turn
    eight = (arm + 2 * trial) % 8
    tried = {s.model for s in select_model(runs(two), rng=rng, injected_rel=0.05).scores}
    assert not {"bootstrap-host", "bootstrap-host-block"} & tried
    tried = {s.model for s in select_model(runs(eight), rng=rng, injected_rel=0.05).scores}
    assert "bootstrap-host" in tried


def test_fallback_prefers_hosts_then_trimmed_trials_then_pairs_then_welch() -> None:
    arm = np.tile([0, 1], 7)
    ones = np.ones(14)
    many_hosts = MetricSample.from_arrays(ones, arm, host=np.arange(14) % 8)
    assert fallback_model(many_hosts) == "bootstrap-host"
    # A local lab's two CPU sets, swapped between batches: too few hosts to resample.
    two_swapped_hosts = MetricSample.from_arrays(
        ones, arm, host=(arm + np.repeat(np.arange(7), 2)) % 2, trial=np.repeat(np.arange(7), 2)
    )
    assert fallback_model(two_swapped_hosts) == "trimmed-t-none"
    one_host_per_arm = MetricSample.from_arrays(
        ones, arm, host=arm, trial=np.repeat(np.arange(7), 2)
    )
    assert fallback_model(one_host_per_arm) == "trimmed-t-none"
    # From 5 trials 20% trimming drops one trial at each end; below, nothing can be trimmed
    # and the trimmed test would be the paired t-test.
    five_trials = MetricSample.from_arrays(ones[:10], arm[:10], trial=np.repeat(np.arange(5), 2))
    assert fallback_model(five_trials) == "trimmed-t-none"
    four_trials = MetricSample.from_arrays(ones[:8], arm[:8], trial=np.repeat(np.arange(4), 2))
    assert fallback_model(four_trials) == "paired-t-none"
    two_trials = MetricSample.from_arrays(ones[:4], arm[:4], trial=[0, 0, 1, 1])
    assert fallback_model(two_trials) == "paired-t-none"
    assert fallback_model(MetricSample.from_arrays(ones, arm)) == "welch-none"
    # The trimmed test reaches any alpha; alpha no longer changes the choice.
    assert fallback_model(four_trials, alpha=0.2) == "paired-t-none"


def test_selection_skips_outlier_models_for_batch_level_metrics() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The model lists do
    not depend on the draw; that some model is selected does, with a margin not recorded for this
    seed."""
    # CPU per request: one row per trial, batch and arm. The outlier preprocessings would
    # drop whole batches; selection leaves them out instead of failing on them.
    rng = np.random.default_rng(8)
    runs = []
    for _ in range(12):
        trial = np.repeat(np.arange(8), 4)
        batch = np.tile([0, 0, 1, 1], 8)
        arm = np.tile([0, 1, 1, 0], 8)
        value = 100.0 * (1 + rng.normal(0, 0.01, 8))[trial] * (1 + rng.normal(0, 0.005, 32))
        runs.append(MetricSample.from_arrays(value, arm, trial=trial, batch=batch))
    selection = select_model(runs, rng=rng, injected_rel=0.02)
    names = {score.model for score in selection.scores}
    assert "t-test-none" in names and "permutation-none" in names
    assert not any("outlier" in name for name in names)
    assert selection.best is not None and "outlier" not in selection.best
