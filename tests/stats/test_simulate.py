"""The random-effects simulator of Perflab Eq. 4."""

from __future__ import annotations

import numpy as np
import pytest

from hairline.stats.designs import VarianceComponents, schedule, standard_error
from hairline.stats.simulate import simulate, simulate_values

ENDPOINT_1 = VarianceComponents.table1(1)


def test_a_simulated_experiment_is_a_metric_sample_with_all_design_columns() -> None:
    sample = simulate(
        "fully-balanced",
        ENDPOINT_1,
        hosts=4,
        requests=8,
        repetitions=2,
        trials=3,
        rng=np.random.default_rng(0),
    )
    assert len(sample) == 3 * 2 * 8 * 2
    assert sample.trial is not None and sample.host is not None and sample.request is not None
    assert sample.batch is not None
    assert np.unique(sample.trial).tolist() == [0, 1, 2]
    # Trials run on fresh hosts and requests: no id is shared between two trials.
    hosts_per_trial = [set(sample.host[sample.trial == t].tolist()) for t in range(3)]
    assert not hosts_per_trial[0] & hosts_per_trial[1]
    assert len(np.unique(sample.host)) == 12
    assert len(np.unique(sample.request)) == 24


def test_same_seed_same_experiment() -> None:
    def draw(seed: int) -> np.ndarray:
        return simulate(
            "unbalanced", ENDPOINT_1, hosts=4, requests=8, rng=np.random.default_rng(seed)
        ).value

    assert np.array_equal(draw(5), draw(5))
    assert not np.array_equal(draw(5), draw(6))


def test_injected_effect_shifts_arm_b_on_average() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The bound is 4
    standard errors of the mean of 2,000 estimates: about 1 seed in 16,000 would fail it."""
    plan = schedule("fully-balanced", hosts=16, requests=256)
    values = simulate_values(
        plan, ENDPOINT_1, n_experiments=2000, effect=0.25, rng=np.random.default_rng(1)
    )
    is_b = plan.arm == 1
    estimates = values[:, is_b].mean(axis=1) - values[:, ~is_b].mean(axis=1)
    se = standard_error("fully-balanced", ENDPOINT_1, hosts=16, requests=256)
    # The mean of 2000 estimates is within 4 standard errors of its own spread.
    assert abs(estimates.mean() - 0.25) < 4 * se / np.sqrt(2000)


def test_exp_link_makes_the_effect_multiplicative() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margin is thin:
    64 rows per arm with 1% noise give the ratio an sd of about 0.0018, so the 0.005 tolerance is
    about 2.8 sd and about 1 seed in 200 would fail it; this seed's distance from the bound is not
    recorded."""
    quiet = VarianceComponents(0.0, 0.0, 0.0, 0.0, 0.01, mu=np.log(100.0))
    plan = schedule("request-balanced", hosts=2, requests=64)
    values = simulate_values(
        plan, quiet, effect=np.log(1.02), link="exp", rng=np.random.default_rng(2)
    )[0]
    ratio = values[plan.arm == 1].mean() / values[plan.arm == 0].mean()
    assert ratio == pytest.approx(1.02, abs=0.005)


def test_treatment_interactions_add_their_variance_to_the_estimate() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The 10% is about 9 sd
    of an sd estimated from 4,000 draws (1.1%)."""
    hosts, requests, tau_request, tau_host = 8, 64, 0.4, 0.1
    plan = schedule("fully-balanced", hosts=hosts, requests=requests)
    values = simulate_values(
        plan,
        ENDPOINT_1,
        n_experiments=4000,
        sigma_request_treatment=tau_request,
        sigma_host_treatment=tau_host,
        rng=np.random.default_rng(3),
    )
    is_b = plan.arm == 1
    estimates = values[:, is_b].mean(axis=1) - values[:, ~is_b].mean(axis=1)
    base = standard_error("fully-balanced", ENDPOINT_1, hosts=hosts, requests=requests)
    # B's mean carries the average of R request and H host interaction draws.
    expected = np.sqrt(base**2 + tau_request**2 / requests + tau_host**2 / hosts)
    assert np.std(estimates, ddof=1) == pytest.approx(expected, rel=0.10)


def test_bad_options_are_named() -> None:
    plan = schedule("unbalanced", hosts=2, requests=2)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="n_experiments must be a positive integer"):
        simulate_values(plan, ENDPOINT_1, n_experiments=0, rng=rng)
    with pytest.raises(ValueError, match="sigma_host_treatment"):
        simulate_values(plan, ENDPOINT_1, sigma_host_treatment=-1.0, rng=rng)
    with pytest.raises(ValueError, match="link must be"):
        simulate_values(plan, ENDPOINT_1, link="log", rng=rng)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"numpy\.random\.Generator"):
        simulate_values(plan, ENDPOINT_1, rng=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="trials must be a positive integer"):
        simulate("unbalanced", ENDPOINT_1, hosts=2, requests=2, trials=0, rng=rng)
