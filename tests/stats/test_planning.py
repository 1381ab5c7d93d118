"""Planning trials (ServiceLab figure 6) and designs under a budget (Perflab 3.1.2)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from hairline.stats.data import MetricSample
from hairline.stats.designs import VarianceComponents, schedule
from hairline.stats.planning import (
    CostModel,
    half_width_curve,
    plan_designs,
    trial_effects,
    trial_sd_from_aa,
    trial_sd_from_components,
    trials_by_design,
    trials_needed,
)
from hairline.stats.simulate import simulate, simulate_values

ENDPOINT_1 = VarianceComponents.table1(1)
# Endpoint 1's spreads around a mean of 10, so that relative effects mean something.
SERVICE = VarianceComponents(1.02, 0.12, 0.10, 0.08, 0.13, mu=10.0)
COSTS = CostModel(setup_s=60.0, request_s=1.0, repetition_s=0.5, max_hosts=32)


def test_trials_needed_follows_the_normal_formula() -> None:
    plan = trials_needed(1.0, threshold=0.5)
    # ((1.96 + 0.84) * 1 / 0.5)^2 = 31.4
    assert plan.trials == 32
    assert plan.achieved_power >= 0.8
    assert trials_needed(1.0, threshold=0.5, test="t").trials >= plan.trials


def test_trials_needed_shrink_as_the_threshold_grows() -> None:
    needed = [trials_needed(0.02, threshold=x).trials for x in (0.005, 0.01, 0.02, 0.04, 0.08)]
    assert needed == sorted(needed, reverse=True)
    assert needed[0] > 3 * needed[1]  # a quarter of the threshold squared: about 4 times
    assert needed[-1] == 1


def test_half_width_shrinks_with_the_root_of_trials() -> None:
    curve = half_width_curve(0.01, max_trials=16)
    assert curve.trials.tolist() == list(range(1, 17))
    assert curve.half_width[0] == pytest.approx(1.96 * 0.01, rel=1e-3)
    assert curve.half_width[3] == pytest.approx(curve.half_width[0] / 2)
    t_curve = half_width_curve(0.01, max_trials=16, test="t")
    assert np.isinf(t_curve.half_width[0])
    assert np.all(t_curve.half_width[1:] > curve.half_width[1:])


def test_aa_trials_give_the_spread_the_components_predict() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The 15% is about 3.7
    sd of an sd estimated from 300 trials (4.1%): about 1 seed in 5,000 would fail it."""
    aa = simulate(
        "fully-balanced", SERVICE, hosts=4, requests=16, trials=300, rng=np.random.default_rng(1)
    )
    from_data = trial_sd_from_aa(aa)
    from_components = trial_sd_from_components(
        SERVICE, design="fully-balanced", hosts=4, requests=16, relative=True
    )
    assert from_data == pytest.approx(from_components, rel=0.15)
    # The same answer from per-trial samples or from the effects themselves.
    assert aa.trial is not None
    per_trial = [aa.select(aa.trial == t) for t in range(300)]
    assert trial_sd_from_aa(per_trial) == pytest.approx(from_data)
    assert trial_sd_from_aa(trial_effects(aa).tolist()) == pytest.approx(from_data)


def test_planned_trials_reach_the_planned_power_in_simulation() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The band is
    Binomial(2000, power)'s 99% interval: a correct plan falls outside it for about 1 seed in 100,
    so another seed could fail it that often; this seed's distance from the band is not recorded."""
    hosts, requests, threshold = 4, 16, 0.06
    sd = trial_sd_from_components(
        ENDPOINT_1, design="fully-balanced", hosts=hosts, requests=requests
    )
    plan = trials_needed(sd, threshold=threshold, test="t")
    plan_rows = schedule("fully-balanced", hosts=hosts, requests=requests)
    n_experiments = 2000
    values = simulate_values(
        plan_rows,
        ENDPOINT_1,
        n_experiments=n_experiments * plan.trials,
        effect=threshold,
        rng=np.random.default_rng(2),
    )
    is_b = plan_rows.arm == 1
    effects = (values[:, is_b].mean(axis=1) - values[:, ~is_b].mean(axis=1)).reshape(
        n_experiments, plan.trials
    )
    rejected = stats.ttest_1samp(effects, 0.0, axis=1).pvalue < 0.05
    low, high = stats.binom.interval(0.99, n_experiments, plan.achieved_power)
    assert low / n_experiments <= rejected.mean() <= high / n_experiments


def test_trials_by_design_ranks_fully_balanced_first() -> None:
    plans = trials_by_design(ENDPOINT_1, hosts=16, requests=256, threshold=0.05)
    assert [p.design for p in plans] == [
        "fully-balanced",
        "request-balanced",
        "host-balanced",
        "unbalanced",
    ]
    assert plans[0].trials < plans[-1].trials


@pytest.mark.parametrize("setup_s", [5.0, 60.0, 600.0])
def test_optimiser_picks_fully_balanced_when_request_variance_dominates(setup_s: float) -> None:
    costs = CostModel(setup_s=setup_s, request_s=1.0, repetition_s=0.5, max_hosts=32)
    plans = plan_designs(ENDPOINT_1, budget_s=3600.0, costs=costs)
    assert plans[0].design == "fully-balanced"
    assert all(p.cost_s <= 3600.0 for p in plans)
    assert [p.standard_error for p in plans] == sorted(p.standard_error for p in plans)


def test_without_replay_the_optimiser_balances_hosts() -> None:
    plans = plan_designs(
        ENDPOINT_1, budget_s=3600.0, costs=COSTS, designs=("unbalanced", "host-balanced")
    )
    assert plans[0].design == "host-balanced"


def test_a_larger_budget_never_costs_precision() -> None:
    small = plan_designs(ENDPOINT_1, budget_s=1800.0, costs=COSTS)[0]
    large = plan_designs(ENDPOINT_1, budget_s=7200.0, costs=COSTS)[0]
    assert large.standard_error < small.standard_error


def test_the_planned_standard_error_matches_simulation() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The 10% is about 8 sd
    of an sd estimated from 3,000 draws (1.3%)."""
    best = plan_designs(ENDPOINT_1, budget_s=3600.0, costs=COSTS)[0]
    plan_rows = schedule(
        best.design, hosts=best.hosts, requests=best.requests, repetitions=best.repetitions
    )
    values = simulate_values(
        plan_rows, ENDPOINT_1, n_experiments=3000, rng=np.random.default_rng(3)
    )
    is_b = plan_rows.arm == 1
    estimates = values[:, is_b].mean(axis=1) - values[:, ~is_b].mean(axis=1)
    assert np.std(estimates, ddof=1) == pytest.approx(best.standard_error, rel=0.10)


def test_a_budget_too_small_for_any_design_plans_nothing() -> None:
    assert plan_designs(ENDPOINT_1, budget_s=50.0, costs=COSTS) == ()


def test_bad_planning_input_is_named() -> None:
    with pytest.raises(ValueError, match="sd_per_trial must be a finite standard deviation"):
        trials_needed(0.0, threshold=0.1)
    with pytest.raises(ValueError, match="threshold must be a finite non-zero effect"):
        trials_needed(1.0, threshold=0.0)
    with pytest.raises(ValueError, match="power must be between 0 and 1"):
        trials_needed(1.0, threshold=0.1, power=80)
    with pytest.raises(ValueError, match="more than max_trials"):
        trials_needed(1.0, threshold=1e-4, max_trials=1000)
    with pytest.raises(ValueError, match="needs the 'trial' column"):
        trial_sd_from_aa(MetricSample.from_arrays([1.0, 2.0], [0, 1]))
    with pytest.raises(ValueError, match="A/A trial 1: column 'arm' holds"):
        trial_effects(
            [MetricSample.from_arrays([1.0, 2.0], [0, 1]), MetricSample.from_arrays([1.0], [0])]
        )
    with pytest.raises(ValueError, match="at least 2 trials"):
        trial_sd_from_aa([0.01])
    with pytest.raises(ValueError, match=r"components\.mu is 0"):
        trial_sd_from_components(
            VarianceComponents(1, 0, 0, 0, 1),
            design="unbalanced",
            hosts=2,
            requests=2,
            relative=True,
        )
    with pytest.raises(ValueError, match="budget_s must be a positive number"):
        plan_designs(ENDPOINT_1, budget_s=-1.0, costs=COSTS)
    with pytest.raises(ValueError, match="setup_s must be a finite number of seconds"):
        CostModel(setup_s=-1.0, request_s=1.0, repetition_s=1.0, max_hosts=4)
