"""Capacity mode's PID search (lab/capacity_pid.py): the loop on a simulated service's
intervals, the settings from a file, and on the real sample service against the probe
search (slow)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from hairline import engine
from hairline.capacity.pid import PidSettings
from hairline.capacity.search import SearchOutcome, SearchSettings
from hairline.config import load_experiment
from hairline.engine import IntervalStats, IntervalTarget
from hairline.lab.capacity import CONNECTIONS, INTERVAL_MS, SETTLE_S, probe_search
from hairline.lab.capacity_pid import (
    HOLDING,
    UPDATE_INTERVALS,
    capacity_batch,
    drive_pid,
    mean_latency_ms,
    pid_settings,
)

EXAMPLES = Path(__file__).parents[2] / "examples" / "sample-service"
SETTINGS = SearchSettings(slo_p99_ms=20.0, start_rate_per_s=1000.0, confirm_s=2.0, probe_s=0.5)


class SimulatedRun:
    """A ``--control`` run against an M/M/1-like service (p99 ``ln(100) / (capacity -
    rate)``, log-normal noise, seeded): its intervals and its rate."""

    def __init__(self, capacity_per_s: float, *, errors: float = 0.0, seed: int = 0) -> None:
        self.capacity_per_s, self.errors = capacity_per_s, errors
        self.rate_per_s = 0.0
        self.rng = np.random.default_rng(seed)

    def set_rate(self, rate_per_s: float) -> None:
        self.rate_per_s = rate_per_s

    def intervals(self) -> Iterator[IntervalStats]:
        dt_s = INTERVAL_MS / 1000
        while True:
            headroom = max(self.capacity_per_s - self.rate_per_s, 1.0)
            p99_us = 1e6 * math.log(100) / headroom * math.exp(0.2 * self.rng.standard_normal())
            n = round(self.rate_per_s * dt_s)
            target = IntervalTarget(n, round(n * self.errors), n, self.rate_per_s, p99_us / 4,
                                    p99_us, mean_us=p99_us / 4.6)  # fmt: skip
            yield IntervalStats(0.0, dt_s, self.rate_per_s, {"arm": target}, scheduled=n)


def test_it_settles_holds_and_reports_the_mean_rate_of_the_hold() -> None:
    run = SimulatedRun(4000.0)
    pid = PidSettings(target_latency_ms=20.0, start_rate_per_s=1000.0)
    outcome = drive_pid(run.intervals(), run.set_rate, SETTINGS, pid, "p99")

    truth = 4000.0 - math.log(100) / 0.020
    assert outcome.stopped_by == "slo"
    assert abs(outcome.max_rate_per_s / truth - 1) < 0.05
    hold = [p for p in outcome.probes if p.note == HOLDING]
    assert len(hold) == SETTINGS.confirm_s / (UPDATE_INTERVALS * INTERVAL_MS / 1000)
    assert outcome.load_s == pytest.approx(len(outcome.probes) * 0.5)


def test_a_mean_target_settles_where_the_mean_meets_it() -> None:
    run = SimulatedRun(4000.0, seed=3)
    pid = PidSettings(target_latency_ms=2.0, start_rate_per_s=1000.0)
    outcome = drive_pid(run.intervals(), run.set_rate, SETTINGS, pid, "mean")

    truth = 4000.0 - math.log(100) / 4.6 / 0.002  # the simulated mean is p99 / 4.6
    assert abs(outcome.max_rate_per_s / truth - 1) < 0.05


def test_errors_over_the_limit_bring_it_down_to_no_capacity() -> None:
    run = SimulatedRun(4000.0, errors=0.5)
    pid = PidSettings(target_latency_ms=20.0, start_rate_per_s=1000.0, min_rate_per_s=10.0)
    outcome = drive_pid(run.intervals(), run.set_rate, SETTINGS, pid, "p99")

    assert (outcome.stopped_by, outcome.max_rate_per_s) == ("min_rate", 0.0)


def test_the_mean_weighs_each_interval_by_its_responses() -> None:
    def interval(requests: int, mean_us: float) -> IntervalStats:
        target = IntervalTarget(requests, 0, requests, 0.0, 0.0, 0.0, mean_us=mean_us)
        return IntervalStats(0.0, 0.25, 0.0, {"arm": target})

    assert mean_latency_ms([interval(100, 1000.0), interval(300, 3000.0)]) == pytest.approx(2.5)
    assert math.isnan(mean_latency_ms([interval(0, math.nan)]))


def test_a_file_with_search_pid_gets_the_pid_and_its_target(tmp_path: Path) -> None:
    text = (EXAMPLES / "capacity.toml").read_text().replace("probe_s = 0.5", 'search = "pid"')
    path = tmp_path / "pid.toml"
    path.write_text(text.replace('"service.toml"', f'"{EXAMPLES / "service.toml"}"')
                    .replace('"trace.jsonl"', f'"{EXAMPLES / "trace.jsonl"}"'))  # fmt: skip
    config = load_experiment(path)

    pid = pid_settings(config)
    assert (pid.target_latency_ms, pid.start_rate_per_s) == (20.0, 1000.0)
    assert capacity_batch(config)._drive is not probe_search
    assert capacity_batch(load_experiment(EXAMPLES / "capacity.toml"))._drive is probe_search


@pytest.mark.slow
def test_on_the_sample_service_the_pid_settles_near_the_probe_search(
    sample_service, engine_path: Path
) -> None:
    """One sleeping worker (its knee does not move with the noisy CPUs), a 20 ms p99
    target: the probe search's knee, then the PID's settled rate on the same service.

    False failure: about 1e-3. The PID holds the rate at which the p99 averages its target
    over the hold, so it sits at or past the rate where the search's full-length probes
    start failing, and the search answers the low end of its last bracket (a short
    failure is trusted): the PID reads higher, by a ratio measured at 1.050, 1.025, 1.084,
    1.051, 0.942, 1.056 (six runs of this test, 2026-11-29, beside other work), 1.033,
    1.060 (earlier runs) and 1.159 (a fresh clone's suite, 2026-11-29, which failed the 15%
    bound this test had): mean 1.051, standard deviation 0.057. The bounds, 0.75 and 1.35,
    are 5.2 standard deviations from that mean (a t on 8 degrees of freedom passes them
    with a chance under 1e-3, a normal under 1e-6). A PID that settles at half or twice the
    knee fails. How close the two methods agree is bench/capacity's figure, not this
    test's."""
    # Twice capacity.toml's sleep: a knee near 2,000/s, where the load generator keeps its
    # schedule on a busy 2-CPU VM (near 4,000/s it fell behind while other tests ran).
    service = sample_service("--work", "sleep", "--threads", "1", "--regress-cpu", "1")

    def plan() -> engine.LoadPlan:
        return engine.LoadPlan(
            targets=(("arm", service.url),), trace=EXAMPLES / "trace.jsonl",
            rate_per_s=SETTINGS.start_rate_per_s, duration_s=0, interval_ms=INTERVAL_MS,
            connections=CONNECTIONS,
        )  # fmt: skip

    def again_if_spoiled(drive: Callable[[engine.ControlledLoad], SearchOutcome]) -> SearchOutcome:
        # As the lab runs a spoiled batch again: on a busy 2-CPU VM the engine's pacer
        # falls behind now and then near 2,300/s, which spoils a search.
        for _ in range(3):
            with engine.ControlledLoad(plan(), engine=engine_path) as load:
                outcome = drive(load)
            if not outcome.spoiled:
                break
        return outcome

    searched = again_if_spoiled(lambda load: probe_search(load, SETTINGS, None, 1))
    pid = PidSettings(target_latency_ms=SETTINGS.slo_p99_ms, start_rate_per_s=1000.0)
    driven = again_if_spoiled(
        lambda load: drive_pid(load.intervals(timeout_s=10.0), load.set_rate, SETTINGS, pid, "p99")
    )

    trajectory = [(round(p.rate_per_s), p.note) for p in driven.probes]
    assert searched.stopped_by == driven.stopped_by == "slo", trajectory
    ratio = driven.max_rate_per_s / searched.max_rate_per_s
    assert 0.75 < ratio < 1.35, (driven.max_rate_per_s, searched.max_rate_per_s, trajectory)
    hold = [p.rate_per_s for p in driven.probes if p.note == HOLDING]
    assert all(abs(r / driven.max_rate_per_s - 1) <= 0.10 for r in hold), trajectory
    took_s = driven.load_s + SETTLE_S
    print(f"search {searched.max_rate_per_s:.0f}/s in {searched.load_s:.1f} s, "
          f"pid {driven.max_rate_per_s:.0f}/s in {took_s:.1f} s: {trajectory}")  # fmt: skip
