"""The semantic balancer, simulated: a pool of 40 hosts, four partitions, a request mix that
shifts, loads measured with noise (a seeded rng), one step per interval (the fake clock)."""

from __future__ import annotations

import numpy as np
import pytest

from hairline.routing.balancer import BalancerSettings, BalancerState, realise, start, step

HOSTS = tuple(f"h{i:02d}" for i in range(40))
BEFORE = {"p0": 0.4, "p1": 0.3, "p2": 0.2, "p3": 0.1}
AFTER = {"p0": 0.15, "p1": 0.2, "p2": 0.25, "p3": 0.4}


def simulate(
    intervals: int = 120, shift_at: int = 40, noise: float = 0.02, seed: int = 0
) -> tuple[list[BalancerState], list[dict[str, float]]]:
    """The states after each interval and the loads measured in it (requests/s)."""
    rng = np.random.default_rng(seed)
    state = start(HOSTS, BEFORE)
    states, loads = [], []
    for t in range(intervals):
        mix = BEFORE if t < shift_at else AFTER
        measured = {p: 20_000 * m * (1 + noise * rng.standard_normal()) for p, m in mix.items()}
        state = step(state, measured)
        states.append(state)
        loads.append(measured)
    return states, loads


def load_per_host_error(state: BalancerState, loads: dict[str, float]) -> dict[str, float]:
    """Each partition's load per host it really has, against the pool's average."""
    average = sum(loads.values()) / len(HOSTS)
    capacity = state.placement.capacity()
    return {p: loads[p] / capacity[p] / average - 1 for p in loads}


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_loads_stay_within_10_percent_of_the_pool_after_the_mix_shifts(seed: int) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The loads carry 2%
    noise against a 10% bound; each seed's largest error is not recorded."""
    states, loads = simulate(seed=seed)
    # Twenty intervals after the shift (20 minutes at the paper's one a minute) and after.
    for state, measured in zip(states[60:], loads[60:], strict=True):
        errors = load_per_host_error(state, measured)
        assert max(abs(e) for e in errors.values()) <= 0.10, errors


def returns(states: list[BalancerState], host: str) -> int:
    """How often ``host`` went back to a partition it had just left (A -> B -> A)."""
    seen = [states[0].placement.home[host]]
    for state in states:
        if state.placement.home[host] != seen[-1]:
            seen.append(state.placement.home[host])
    return sum(1 for a, c in zip(seen, seen[2:], strict=False) if a == c)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_it_does_not_oscillate(seed: int) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The counts of sign
    changes (at most 3) and the half-host band have margins not recorded for these four seeds."""
    states, _ = simulate(seed=seed)
    settled = states[60:]
    # Once settled no whole host moves, and no host ever goes back where it came from.
    assert all(s.placement.home == settled[0].placement.home for s in settled)
    assert sum(returns(states, host) for host in HOSTS) == 0
    for p in BEFORE:
        # Each share stays within half a host ...
        shares = [s.shares[p] for s in settled]
        assert max(shares) - min(shares) < 0.5, p
        # ... and its error (noise within the dead band counts as none) rarely turns.
        errors = np.array([s.previous_errors[p] for s in settled])
        signs = np.sign(errors[errors != 0])
        assert np.count_nonzero(np.diff(signs)) <= 3, p


def test_capacity_moves_toward_the_partition_that_got_hotter() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The mix moves p3 from
    10% to 40% of 40 hosts (12 hosts) against the bound of 10, and p0 from 40% to 15% (10 hosts)
    against 8."""
    states, _ = simulate()
    before, after = states[39].placement.capacity(), states[-1].placement.capacity()
    assert after["p3"] > before["p3"] + 10 and after["p0"] < before["p0"] - 8


def test_a_share_is_whole_hosts_and_at_most_one_split_host() -> None:
    settings = BalancerSettings()
    shares = {"p0": 10.3, "p1": 9.9, "p2": 10.45, "p3": 9.35}
    placement = realise(shares, HOSTS, None, settings)
    weights = placement.weights()
    fractional = {h for hosts in weights.values() for h, w in hosts.items() if w < 1.0}
    assert len(fractional) <= 1
    assert sum(placement.capacity().values()) == pytest.approx(len(HOSTS))
    assert all(abs(placement.capacity()[p] - shares[p]) < 0.66 for p in shares)


def test_no_partition_is_ever_emptied() -> None:
    state = start(HOSTS[:5], {"p0": 0.97, "p1": 0.01, "p2": 0.01, "p3": 0.01})
    for _ in range(30):
        state = step(state, {"p0": 1000.0, "p1": 0.0, "p2": 1.0, "p3": 0.0})
        assert min(state.shares.values()) >= 1.0
        assert all(state.placement.capacity()[p] >= 1.0 for p in state.shares)


def test_an_idle_pool_keeps_its_shares() -> None:
    state = start(HOSTS, BEFORE)
    assert step(state, dict.fromkeys(BEFORE, 0.0)).shares == state.shares
