"""The model registry: every name runs, reports in the metric's units, and holds its
false-positive rate on data drawn the way it assumes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from numpy.typing import NDArray

from hairline.stats import dist
from hairline.stats.data import MetricSample
from hairline.stats.models import PAPER_MODELS, get_model, list_models, model_info, run_model
from hairline.stats.simulate import in_binomial_band
from hairline.stats.trialcore import per_trial_decision


def one_trial(rng: np.random.Generator, effect_rel: float = 0.0) -> MetricSample:
    """Independent rows, one trial: the t-tests' and the iid bootstrap's world."""
    n = 60
    value = rng.normal(100.0, 10.0, 2 * n) * np.repeat([1.0, 1.0 + effect_rel], n)
    return MetricSample.from_arrays(
        value, np.repeat([0, 1], n), request=np.tile(np.arange(n), 2), host=np.arange(2 * n)
    )


def trials(rng: np.random.Generator, effect_rel: float = 0.0) -> MetricSample:
    """Eight trials sharing a random level between their arms: the permutation test's world."""
    count, rows = 8, 20
    trial = np.repeat(np.arange(count), 2 * rows)
    arm = np.tile(np.repeat([0, 1], rows), count)
    value = 100.0 + rng.normal(0.0, 5.0, count)[trial] + rng.normal(0.0, 5.0, len(trial))
    return MetricSample.from_arrays(
        value * np.where(arm == 1, 1 + effect_rel, 1.0), arm, trial=trial
    )


def hosts(rng: np.random.Generator, effect_rel: float = 0.0) -> MetricSample:
    """Twelve hosts per arm, each with its own level and its own requests: the host bootstrap's."""
    per_arm, rows = 12, 30
    host = np.repeat(np.arange(2 * per_arm), rows)
    arm = (host >= per_arm).astype(np.int64)
    value = 100.0 + rng.normal(0.0, 3.0, 2 * per_arm)[host] + rng.normal(0.0, 10.0, len(host))
    return MetricSample.from_arrays(
        value * np.where(arm == 1, 1 + effect_rel, 1.0),
        arm,
        host=host,
        request=np.arange(len(host)),
    )


def world_of(name: str) -> Callable[..., MetricSample]:
    info = model_info(name)
    if info.test in ("permutation", "paired-t", "trimmed-t"):
        return trials
    if name in ("bootstrap-host", "bootstrap-host-block"):
        return hosts
    return one_trial


def test_the_papers_seven_are_registered() -> None:
    names = list_models()
    assert set(PAPER_MODELS) <= set(names)
    assert {"bootstrap-iid", "bootstrap-request", "bootstrap-host", "bootstrap-host-block"} <= set(
        names
    )
    assert {"welch-none", "welch-sqrt"} <= set(names)


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown model 'ttest'.*t-test-none.*bootstrap-host"):
        get_model("ttest")


def test_ci_test_without_history_says_what_to_do() -> None:
    sample = one_trial(np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"needs history.*welch-none"):
        run_model("ci-test", sample, rng=np.random.default_rng(0))


def test_missing_column_is_named_before_running() -> None:
    with pytest.raises(ValueError, match="'trial'"):
        run_model(
            "permutation-none", one_trial(np.random.default_rng(0)), rng=np.random.default_rng(0)
        )


@pytest.mark.parametrize("name", list_models())
def test_every_model_reports_in_the_metrics_units(name: str) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The 3-point tolerance
    on a 10% effect is several SE for most worlds (not recorded per model for this seed)."""
    # B is A scaled by 1.10 everywhere, so every model's location moves by 10% exactly
    # (the outlier models' pooled thresholds excepted: they cap B's top values).
    rng = np.random.default_rng(1)
    base = world_of(name)(rng)
    scaled = MetricSample(
        value=np.where(base.arm == 1, 1.1, 1.0) * base.value,
        arm=base.arm,
        trial=base.trial,
        host=base.host,
        request=base.request,
    )
    result = run_model(name, scaled, rng=rng, history=[0.01, -0.01, 0.0, 0.02, -0.02])
    assert result.model == name
    assert result.ci_rel[0] <= result.effect_rel <= result.ci_rel[1]
    assert result.ci_abs[0] <= result.effect_abs <= result.ci_abs[1]
    assert result.effect_abs == pytest.approx(result.mean_b - result.mean_a)
    assert result.effect_rel == pytest.approx(result.effect_abs / result.mean_a)
    if "outlier" not in name:
        assert result.effect_rel == pytest.approx(0.10, abs=0.03)


@pytest.mark.parametrize("name", [n for n in list_models() if n != "bootstrap-iid"])
def test_every_model_holds_its_false_positive_rate(name: str) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The band is the 99.9%
    band of 300 runs: a correct model falls outside it for about 1 seed in 1,000, so another seed
    could fail one of the models that often; the distance from the band is not recorded per
    model."""
    rng = np.random.default_rng(sum(map(ord, name)))
    make = world_of(name)
    history = [
        float(np.mean(run.arm_values(1)) / np.mean(run.arm_values(0)) - 1)
        for run in (make(rng) for _ in range(200))
    ]
    sims = 300
    hits = sum(
        run_model(name, make(rng), rng=rng, history=history).p_value < 0.05 for _ in range(sims)
    )
    assert in_binomial_band(hits, sims, 0.05), (name, hits / sims)


def test_host_noise_breaks_the_iid_models_that_ignore_it() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. Welch's rate with
    host noise (bound 0.2) has a margin not recorded for this seed."""
    # The reason the registry has clustered models: rows of one host are not independent.
    rng = np.random.default_rng(6)
    sims = 200
    iid = sum(run_model("welch-none", hosts(rng), rng=rng).p_value < 0.05 for _ in range(sims))
    assert iid / sims > 0.2


def tail_latency_trials(
    rng: np.random.Generator, sims: int, trials: int, effect_rel: float = 0.0
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per-trial arm means of a batch p99 (sims x trials): two batches per arm and trial, a
    trial level both arms share, and heavy-tailed batch noise (log-t with 3 degrees of
    freedom) scaled so that a trial's log-ratio B/A has sd about 0.46, as the sample
    service's latency_p99_us had in 40 measured A/A runs (0.45, bench/RESULTS.md)."""
    level = rng.lognormal(0.0, 0.3, (sims, trials, 1, 1))
    noise = np.exp(0.25 * rng.standard_t(3, (sims, trials, 2, 2)))
    batches = 1000.0 * level * noise
    return batches[..., 0].mean(axis=-1), batches[..., 1].mean(axis=-1) * (1.0 + effect_rel)


@pytest.mark.parametrize("trials", [4, 8, 16])
@pytest.mark.parametrize("name", ["paired-t-none", "trimmed-t-none"])
def test_fallback_models_do_not_flag_identical_tail_latency_beyond_alpha(
    name: str, trials: int
) -> None:
    """Issue #31: a bisection step on identical code flagged latency_p99_us +40%. The per-trial
    fallback models (4 trials, and the 8 and 16 of a repeated step) on simulated p99s as noisy
    and heavy-tailed as the measured ones: at most alpha, and a doubling still found in most
    runs (it is not a test that never rejects). At most 0.25 s a case, about 0.7 s for the six
    (the array form of the models, which tests/stats/test_trimmed.py checks against the
    registered ones).

    False failure: none: seeded rngs make every draw the same on every run. The margin is the
    check's own: a model at exactly alpha exceeds the 99.9% band's top (5.5%) for about 1 seed in
    2,000; these models sit below alpha (these seeds: paired t 3.4-3.5%, trimmed t 4.3-4.7%;
    other seeds gave 2.9-5.0%). A doubling is found in 51-100% of runs (4 trials: 53% and
    51%, against the check's 40%, about 9 sd of 2,000 runs below)."""
    rng = np.random.default_rng(1300 + trials)
    sims = 20_000
    a, b = tail_latency_trials(rng, sims, trials)
    hits = int(np.count_nonzero(per_trial_decision(name, a, b, 0.05).p_value < 0.05))
    _, high = dist.binom_interval(0.999, sims, 0.05)
    assert hits <= high, hits / sims
    a, b = tail_latency_trials(rng, 2_000, trials, effect_rel=1.0)
    found = per_trial_decision(name, a, b, 0.05)
    assert np.mean((found.p_value < 0.05) & (found.effect_rel > 0)) > 0.4
