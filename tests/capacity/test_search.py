"""The capacity search against a simulated service whose knee is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hairline.capacity.search import (
    Probe,
    SearchSettings,
    bisect_capacity,
    dithered,
    probe_failure,
    search_capacity,
)

SLO_MS = 20.0


class SimulatedService:
    """p99 = SLO * (rate / knee)^8 with 3% noise: it crosses the SLO at ``knee_per_s``.

    Short probes are optimistic, as a real queue is: a probe of a fraction f of the full
    duration sees the knee ``optimism * (1 - f)`` higher. Rates from ``saturates_at_per_s``
    up are more than the load generator can send.
    """

    def __init__(
        self,
        knee_per_s: float,
        *,
        seed: int,
        full_s: float = 10.0,
        optimism: float = 0.0,
        saturates_at_per_s: float = math.inf,
    ) -> None:
        self.knee_per_s = knee_per_s
        self.full_s = full_s
        self.optimism = optimism
        self.saturates_at_per_s = saturates_at_per_s
        self.rng = np.random.default_rng(seed)

    def __call__(self, rate_per_s: float, duration_s: float) -> Probe:
        seen_knee = self.knee_per_s * (1 + self.optimism * (1 - duration_s / self.full_s))
        p99_ms = SLO_MS * (rate_per_s / seen_knee) ** 8 * math.exp(self.rng.normal(0, 0.03))
        saturated = rate_per_s >= self.saturates_at_per_s
        return Probe(
            rate_per_s=rate_per_s,
            duration_s=duration_s,
            served_per_s=min(rate_per_s, seen_knee),
            p99_ms=p99_ms,
            error_rate=0.0,
            cpu_utilization=None,
            valid=not saturated,
            note="generator saturated" if saturated else "",
        )


def settings(**changes: float) -> SearchSettings:
    base = SearchSettings(slo_p99_ms=SLO_MS, start_rate_per_s=100.0, confirm_s=10.0)
    return SearchSettings(**{**base.__dict__, **changes})


@pytest.mark.parametrize("seed", range(8))
def test_both_find_the_knee_within_tolerance_and_the_search_needs_less_load(seed: int) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. docs/capacity.md: the
    search finds the knee within 3% on every seed with at most half of bisection's load-seconds; how
    close to 3% and to one half each of these eight seeds comes is not recorded."""
    knee = 1234.0
    searched = search_capacity(SimulatedService(knee, seed=seed), settings())
    bisected = bisect_capacity(SimulatedService(knee, seed=seed), settings())

    for outcome in (searched, bisected):
        assert outcome.stopped_by == "slo"
        assert outcome.max_rate_per_s == pytest.approx(knee, rel=0.03)
    assert searched.load_s <= 0.5 * bisected.load_s


def test_the_result_passed_at_full_duration() -> None:
    """False failure: none: seeded, and the result is by construction a rate that passed."""
    outcome = search_capacity(SimulatedService(800.0, seed=1, optimism=0.1), settings())

    full = [p for p in outcome.probes if p.duration_s == 10.0]
    passed = [p.rate_per_s for p in full if probe_failure(p, settings()) is None]
    assert outcome.max_rate_per_s == max(passed)


def test_a_failed_confirmation_moves_the_result_down() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The 3% against a knee
    seen 10% high has a margin not recorded for seed 3."""
    # Short probes see the knee 10% too high: the first confirmation fails.
    service = SimulatedService(1000.0, seed=3, optimism=0.1)
    outcome = search_capacity(service, settings())

    confirmations = [p for p in outcome.probes if p.duration_s == 10.0]
    first = confirmations[0]
    assert probe_failure(first, settings()) is not None
    assert first.rate_per_s > 1030
    assert outcome.max_rate_per_s < first.rate_per_s
    assert outcome.max_rate_per_s == pytest.approx(1000.0, rel=0.03)
    assert outcome.stopped_by == "slo"


def test_a_saturated_generator_stops_the_search_and_reports_no_capacity() -> None:
    service = SimulatedService(5000.0, seed=0, saturates_at_per_s=3000.0)

    for search in (search_capacity, bisect_capacity):
        outcome = search(service, settings())
        assert outcome.stopped_by == "generator"
        assert outcome.spoiled
        assert not outcome.probes[-1].valid
        assert outcome.max_rate_per_s == 0.0


def test_max_rate_caps_the_search() -> None:
    outcome = search_capacity(SimulatedService(5000.0, seed=0), settings(max_rate_per_s=800.0))

    assert outcome.stopped_by == "max_rate"
    assert outcome.max_rate_per_s == 800.0


def test_a_service_that_fails_at_the_lowest_rate_has_no_capacity() -> None:
    outcome = search_capacity(SimulatedService(0.5, seed=0), settings(min_rate_per_s=10.0))

    assert outcome.stopped_by == "min_rate"
    assert outcome.max_rate_per_s == 0.0


def test_a_start_above_the_knee_searches_down() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The 3% has a margin
    not recorded for seed 2; the probes' noise is 3% on a p99 that grows as the eighth power of the
    rate, about 0.4% of rate."""
    outcome = search_capacity(SimulatedService(300.0, seed=2), settings(start_rate_per_s=5000.0))

    assert outcome.max_rate_per_s == pytest.approx(300.0, rel=0.03)


def test_probe_failure_names_what_broke() -> None:
    ok = Probe(100.0, 1.0, 100.0, 5.0, 0.0, 0.5, valid=True)
    assert probe_failure(ok, settings()) is None
    nothing_answered = Probe(100.0, 1.0, 0.0, math.nan, 0.0, 0.5, valid=True)
    assert "p99" in (probe_failure(nothing_answered, settings()) or "")
    errors = Probe(100.0, 1.0, 100.0, 5.0, 0.2, 0.5, valid=True)
    assert "error rate" in (probe_failure(errors, settings()) or "")
    busy = Probe(100.0, 1.0, 100.0, 5.0, 0.0, 0.95, valid=True)
    assert "CPU" in (probe_failure(busy, settings(max_cpu_utilization=0.8)) or "")


class SharpKnee:
    """A noiseless service that meets the SLO up to ``knee_per_s`` and not above."""

    def __init__(self, knee_per_s: float) -> None:
        self.knee_per_s = knee_per_s

    def __call__(self, rate_per_s: float, duration_s: float) -> Probe:
        p99_ms = SLO_MS * (0.5 if rate_per_s <= self.knee_per_s else 2.0)
        return Probe(rate_per_s, duration_s, rate_per_s, p99_ms, 0.0, None, valid=True)


def test_without_a_dither_every_search_reads_the_same_grid_point() -> None:
    """Why the lab dithers: a knee anywhere in one cell of the grid reads the same."""
    readings = {search_capacity(SharpKnee(k), settings(tolerance=0.15)).max_rate_per_s
                for k in np.linspace(1140.0, 1190.0, 11)}  # fmt: skip

    assert len(readings) == 1


def test_a_dithered_search_reads_below_the_knee_by_a_uniform_share_of_its_cell() -> None:
    """False failure: none: no randomness (the fractions are an even grid). The reading's
    relative error, spread evenly over the cell, has the uniform's mean (half the cell) and
    every reading is below the knee by less than the tolerance."""
    knee, tolerance = 1160.0, 0.15
    base = settings(tolerance=tolerance)
    fractions = (np.arange(400) + 0.5) / 400
    readings = np.array([
        search_capacity(SharpKnee(knee), dithered(base, f)).max_rate_per_s for f in fractions
    ])  # fmt: skip
    shortfall = np.log(knee / readings)

    assert np.all(readings <= knee) and np.all(readings >= knee / (1 + tolerance))
    assert len(np.unique(readings)) > 50  # 94: two fractions may meet on one rate
    # Uniform on [0, cell): spread cell/sqrt(12). The final cells vary between searches
    # (the bisection stops at the first width under the tolerance), so only bounds hold.
    assert 0.02 < np.std(shortfall) < math.log(1 + tolerance) / math.sqrt(12) + 1e-9


def test_the_dither_is_centred_on_the_start_rate() -> None:
    base = settings(start_rate_per_s=1000.0)

    assert dithered(base, 0.5).start_rate_per_s == pytest.approx(1000.0)
    assert dithered(base, 0.0).start_rate_per_s == pytest.approx(1000.0 / math.sqrt(2))
    assert dithered(settings(start_rate_per_s=1.0, min_rate_per_s=1.0), 0.0).start_rate_per_s == 1.0
