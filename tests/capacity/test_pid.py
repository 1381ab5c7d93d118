"""The PID load controller on a simulated service with a known rate at the target."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hairline.capacity.pid import PidSettings, settled, settled_rate, start, step

LN_100 = math.log(100)
DT_S = 0.5


class QueueingService:
    """An M/M/1-like service: p99 sojourn ``ln(100) / (capacity - rate)`` while it keeps
    up, plus the wait behind a backlog that grows while the rate exceeds the capacity
    (drained at the capacity); each measurement with log-normal noise (seeded)."""

    def __init__(self, capacity_per_s: float, *, noise: float, seed: int) -> None:
        self.capacity_per_s = capacity_per_s
        self.noise = noise
        self.backlog = 0.0
        self.rng = np.random.default_rng(seed)

    def rate_at(self, p99_ms: float) -> float:
        """The rate at which the p99 is ``p99_ms`` (the truth the controller must find)."""
        return self.capacity_per_s - LN_100 / (p99_ms / 1000)

    def p99_ms(self, rate_per_s: float, dt_s: float) -> float:
        self.backlog = max(0.0, self.backlog + (rate_per_s - self.capacity_per_s) * dt_s)
        headroom = max(self.capacity_per_s - rate_per_s, 0.01 * self.capacity_per_s)
        ideal_ms = 1000 * (LN_100 / headroom + self.backlog / self.capacity_per_s)
        return ideal_ms * math.exp(self.noise * self.rng.standard_normal())


def drive(service: QueueingService, settings: PidSettings, updates: int) -> list[float]:
    state, rates = start(settings), []
    for _ in range(updates):
        state, rate = step(state, service.p99_ms(state.rate_per_s, DT_S), DT_S)
        rates.append(rate)
    return rates


@pytest.mark.parametrize("noise", [0.15, 0.3])
@pytest.mark.parametrize("seed", range(10))
def test_settles_within_5_percent_of_the_true_rate_and_stays_within_10(
    seed: int, noise: float
) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. Over 20 seeds
    (docs/capacity.md) the controller settled in 17 to 19 updates (bound 30), within 3.8% of the
    true rate (bound 5%), overshot by at most 4.3% (bound 10%) and stayed within 4.5% of its settled
    rate (bound 10%): the closest margin is 1.2 points, on the settled rate."""
    service = QueueingService(4000.0, noise=noise, seed=seed)
    truth = service.rate_at(20.0)  # 3,770/s, the queue 94% busy
    state = start(PidSettings(target_latency_ms=20.0, start_rate_per_s=1000.0))
    rates: list[float] = []
    while not settled(state):
        state, rate = step(state, service.p99_ms(state.rate_per_s, DT_S), DT_S)
        rates.append(rate)
        assert len(rates) < 30, "settles within 15 s"
    value = settled_rate(state)
    assert abs(value / truth - 1) < 0.05, (value, truth)
    assert max(rates) < 1.10 * truth, "the climb overshoots by less than 10%"
    after = []
    for _ in range(40):
        state, rate = step(state, service.p99_ms(state.rate_per_s, DT_S), DT_S)
        after.append(rate)
    assert all(abs(r / value - 1) <= 0.10 for r in after), (min(after), max(after), value)


def test_a_proportional_term_amplifies_the_noise_at_the_knee() -> None:
    """Why kp defaults to 0: the same service, the swing after 30 updates with and without.

    False failure: none: seeded rngs make every draw the same on every run. Both runs use seed 1;
    the size of the gap is not recorded."""

    def swing(kp: float) -> float:
        settings = PidSettings(target_latency_ms=20.0, start_rate_per_s=1000.0, kp=kp)
        rates = drive(QueueingService(4000.0, noise=0.3, seed=1), settings, 80)[30:]
        return max(rates) / min(rates)

    assert swing(0.05) > swing(0.0)


def test_each_update_moves_the_rate_by_at_most_the_step_and_stays_in_bounds() -> None:
    settings = PidSettings(
        target_latency_ms=20.0, start_rate_per_s=100.0, max_rate_per_s=1000.0, ki=50.0
    )
    state, previous = start(settings), 100.0
    for _ in range(10):  # far under the target: it wants to climb as fast as it may
        state, rate = step(state, 0.5, DT_S)
        assert rate <= previous * 2.0 + 1e-9 and rate <= 1000.0
        previous = rate
    assert previous == pytest.approx(1000.0)
    state, rate = step(state, math.nan, DT_S)  # nothing answered: as far over as counts
    assert rate == pytest.approx(500.0)


def test_the_integral_does_not_wind_up_while_the_rate_is_held_at_its_bound() -> None:
    """Held at max_rate_per_s for a minute under the target, it comes down at once when the
    latency breaks it, not after unwinding a minute of integral."""
    settings = PidSettings(target_latency_ms=20.0, start_rate_per_s=100.0, max_rate_per_s=400.0)
    state = start(settings)
    for _ in range(120):
        state, rate = step(state, 1.0, DT_S)
    assert rate == pytest.approx(400.0)
    state, rate = step(state, 100.0, DT_S)
    assert rate < 400.0


def test_the_settle_rule_needs_k_updates_within_the_band() -> None:
    settings = PidSettings(
        target_latency_ms=20.0, start_rate_per_s=1000.0, settle_updates=3, settle_band=0.05
    )
    state = start(settings)
    assert not settled(state) and math.isnan(settled_rate(state))
    for latency_ms in (20.0, 20.0):
        state, _ = step(state, latency_ms, DT_S)
    assert not settled(state)
    state, _ = step(state, 20.0, DT_S)
    assert settled(state) and settled_rate(state) == pytest.approx(1000.0)
    state, _ = step(state, 0.1, DT_S)  # a jump of 3 * ki * dt = 18% leaves the band
    assert not settled(state)


def test_a_knee_like_a_step_is_found_because_each_crossing_shortens_the_step() -> None:
    """A p99 of 2 ms below 3,000/s and 200 ms above (a real service is nearly this): the
    error's size says nothing of the distance, so a fixed gain circles the knee by ~14% a
    step; Kesten's rule (the gain x0.7 at each sign change) settles on it."""

    def p99_ms(rate_per_s: float) -> float:
        return 2.0 if rate_per_s < 3000.0 else 200.0

    def run(gain_decay: float) -> tuple[bool, float]:
        settings = PidSettings(target_latency_ms=20.0, start_rate_per_s=1000.0,
                               gain_decay=gain_decay)  # fmt: skip
        state = start(settings)
        for _ in range(60):
            state, _ = step(state, p99_ms(state.rate_per_s), DT_S)
            if settled(state):
                break
        return settled(state), settled_rate(state)

    assert not run(1.0)[0]
    found, rate = run(0.7)
    assert found and abs(rate / 3000.0 - 1) < 0.05
