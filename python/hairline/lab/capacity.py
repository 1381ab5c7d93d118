"""A capacity-mode batch: each arm's highest rate under the SLO, searched side by side.

The arms are started and warmed up as in any batch (lab/runner.py); then each arm gets a
``--control`` engine run of its own (one target) in a thread of its own, and the search
(:func:`hairline.capacity.search.search_capacity`) changes that run's rate live, one probe
after another. A probe is the run's intervals after the rate change (the interval in which
the rate changed is dropped: it mixes two rates); its p99 is the intervals' p99s weighted
by their responses (the highest interval's was too noisy here: one 250 ms hiccup of a
shared VM failed a probe far below the knee; a queue that grows still lifts the mean), its
CPU utilisation the arm's cgroup CPU over the probe's wall time and CPU set. After a probe
that broke the SLO the rate goes to 0 until nothing is in flight, so that a backlog is not
charged to the next probe.

The batch gives one row per arm, ``max_throughput_per_s``, and writes every probe (the
latency/throughput curve) to ``<tag>.capacity.json`` for the report. A search the engine
spoiled (its generator could not keep a probe's rate) spoils the batch: the rate at which
the generator gave up says nothing about the service.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from hairline import engine
from hairline.capacity.search import (
    Probe,
    SearchOutcome,
    SearchSettings,
    dithered,
    probe_failure,
    search_capacity,
)
from hairline.collect.registry import MAX_THROUGHPUT
from hairline.config import ExperimentConfig
from hairline.errors import EngineError
from hairline.kit.jsonout import write_json
from hairline.lab.runner import Arm, Attempt, Hooks, RunPlan
from hairline.lab.schedule import Batch

__all__ = [
    "CAPACITY_SUFFIX",
    "CONNECTIONS",
    "CapacityBatch",
    "ControlledProber",
    "Drive",
    "capacity_settings",
    "dither_fraction",
    "probe_of",
    "probe_search",
]

CAPACITY_SUFFIX = ".capacity.json"
# Short enough that a 1 s probe has several intervals, long enough to hold a p99.
INTERVAL_MS = 250
# Past the knee requests queue in the service; with the engine's default 32 connections
# they soon all wait for answers and sends go out late: the generator looked saturated at
# 3,200/s (2.4% late) where the service, not the engine, was the limit.
CONNECTIONS = 512
# The share of a probe's sends the engine's pacer may take off its schedule late before
# the probe says nothing of the service. Not the 1% of the engine's late gate: with two
# engines and two arms on a 2-CPU VM, even with the engines at real-time priority, 1-3% of
# the sends of some 0.5 s probes at 1,000-4,000/s left more than 1 ms late (the runs'
# summaries: <tag>-<arm>.json); a generator that cannot keep the rate falls behind on most
# of its sends. A probe that failed the SLO at the load it got is a failure whatever the
# generator's lag (failed_anyway).
GENERATOR_BEHIND_SHARE = 0.05
# Discarded at the start of a run, at the start rate.
SETTLE_S = 1.0
# How long a backlog may take to drain after a failed probe before the run is given up.
_DRAIN_LIMIT_S = 30.0


# Where the search starts when neither [mode] start_rate_per_s nor [load] rate_per_s says.
DEFAULT_START_RATE_PER_S = 100.0


def capacity_settings(config: ExperimentConfig) -> SearchSettings:
    """The search's settings from an experiment file in capacity mode. Pure."""
    mode = config.mode
    assert mode.slo_p99_ms is not None  # config/checks.py requires it in capacity mode
    return SearchSettings(
        slo_p99_ms=mode.slo_p99_ms,
        start_rate_per_s=mode.start_rate_per_s
        or config.load.rate_per_s
        or DEFAULT_START_RATE_PER_S,
        confirm_s=config.load.duration_s,
        probe_s=mode.probe_s,
        tolerance=mode.tolerance,
        max_error_rate=mode.max_error_rate,
        max_cpu_utilization=mode.max_cpu_utilization,
        max_rate_per_s=mode.max_rate_per_s,
    )


class ControlledProber:
    """A ``--control`` run of one target turned into the search's probe callback;
    ``cpu_ns`` reads the service's CPU (its cgroup's) for the probe's utilisation of
    ``cpus`` CPUs (None: not measured)."""

    def __init__(
        self,
        load: engine.ControlledLoad,
        settings: SearchSettings,
        *,
        cpu_ns: Callable[[], int] | None = None,
        cpus: int = 1,
    ) -> None:
        self._load = load
        self._settings = settings
        self._cpu_ns = cpu_ns
        self._cpus = cpus
        self._intervals: Iterator[engine.IntervalStats] = load.intervals(timeout_s=10.0)
        # The run's first second opens its connections: sends wait on connects and go out
        # late (2-6% at 1,000/s); it is no probe.
        for _ in range(round(SETTLE_S * 1000 / INTERVAL_MS)):
            next(self._intervals)

    def __call__(self, rate_per_s: float, duration_s: float) -> Probe:
        self._load.set_rate(rate_per_s)
        next(self._intervals)  # the interval the rate changed in
        wanted = max(1, math.ceil(duration_s * 1000 / INTERVAL_MS))
        cpu_before = self._cpu_ns() if self._cpu_ns else 0
        started = time.monotonic()
        got = [next(self._intervals) for _ in range(wanted)]
        utilization = None
        if self._cpu_ns is not None:
            busy_ns = self._cpu_ns() - cpu_before
            utilization = busy_ns / ((time.monotonic() - started) * 1e9 * self._cpus)
        probe = probe_of(got, rate_per_s, utilization)
        probe = failed_anyway(probe, self._settings)
        if not probe.valid or probe_failure(probe, self._settings) is not None:
            self._drain()
        return probe

    def _drain(self) -> None:
        self._load.set_rate(0.0)
        waited_s = 0.0
        for interval in self._intervals:
            waited_s += interval.end_s - interval.start_s
            if interval.in_flight == 0:
                return
            if waited_s > _DRAIN_LIMIT_S:
                break
        raise EngineError(
            f"requests still in flight {_DRAIN_LIMIT_S:g} s after a probe stopped",
            hint="the service stopped answering; see the arm's log in the runs folder",
        )


def probe_of(
    intervals: Sequence[engine.IntervalStats], rate_per_s: float, cpu_utilization: float | None
) -> Probe:
    """One probe from the intervals of one target's run. Pure."""
    seconds = sum(i.end_s - i.start_s for i in intervals)
    targets = [t for i in intervals for t in i.targets.values()]
    requests = sum(t.requests for t in targets)
    # A send the engine dropped at its in-flight limit was never answered: past the knee
    # that is the service's doing, so it counts against the SLO like an error.
    dropped = sum(i.dropped for i in intervals)
    errors = sum(t.errors for t in targets) + dropped
    answered = [t for t in targets if t.requests and not math.isnan(t.p99_us)]
    weight = sum(t.requests for t in answered)
    # Judged over the whole probe: one stall among the 50 sends of a 250 ms interval at
    # 200/s is already 2%, and that happened at every low rate on this VM.
    whole = engine.IntervalStats(
        start_s=intervals[0].start_s if intervals else 0.0,
        end_s=intervals[-1].end_s if intervals else 0.0,
        rate_per_s=rate_per_s,
        targets={},
        scheduled=sum(i.scheduled for i in intervals),
        behind=sum(i.behind for i in intervals),
    )
    saturated = whole.behind > GENERATOR_BEHIND_SHARE * whole.scheduled
    note = ""
    if saturated:
        note = (
            f"the load generator fell behind its schedule ({whole.behind} of "
            f"{whole.scheduled} sends left late by the engine's own pacer)"
        )
    return Probe(
        rate_per_s=rate_per_s,
        duration_s=seconds,
        served_per_s=requests / seconds if seconds > 0 else 0.0,
        p99_ms=sum(t.p99_us * t.requests for t in answered) / weight / 1000 if weight else math.nan,
        error_rate=errors / (requests + dropped) if requests + dropped else 0.0,
        cpu_utilization=cpu_utilization,
        valid=not saturated,
        note=note,
    )


def failed_anyway(probe: Probe, settings: SearchSettings) -> Probe:
    """A probe whose generator fell behind but whose service failed the SLO (or answered
    with errors) at the load it did get is a valid failure: a late generator sends less
    than scheduled, never more, so the service fails the full load too. Only a probe that
    passed with the generator behind says nothing. Pure.

    Measured on a 2-vCPU VM: the doubling probe past the sample service's knee (8,000/s
    where it serves about 4,000/s) left 200-380 of one interval's sends late in every
    batch, which spoiled the batch although the probe had failed the SLO by 15 times."""
    if probe.valid:
        return probe
    as_valid = dataclasses.replace(probe, valid=True)
    why = probe_failure(as_valid, settings)
    if why is None:
        return probe
    return dataclasses.replace(
        as_valid, note=f"{probe.note}; the service failed at the load it got ({why})"
    )


# How one arm's running ``--control`` load becomes its outcome: the probe search (the
# default) or another (lab/capacity_pid.py); with the arm's CPU reader and CPU count.
Drive = Callable[
    [engine.ControlledLoad, SearchSettings, Callable[[], int] | None, int], SearchOutcome
]


def probe_search(
    load: engine.ControlledLoad,
    settings: SearchSettings,
    cpu_ns: Callable[[], int] | None,
    cpus: int,
) -> SearchOutcome:
    """The probe search (capacity/search.py) over one arm's running load."""
    return search_capacity(ControlledProber(load, settings, cpu_ns=cpu_ns, cpus=cpus), settings)


class CapacityBatch:
    """The lab's ``RunPlan.measure`` in capacity mode: the search for every arm at once."""

    def __init__(self, settings: SearchSettings, *, drive: Drive = probe_search) -> None:
        self.settings = settings
        self._drive = drive

    def __call__(
        self,
        plan: RunPlan,
        batch: Batch,
        tag: str,
        arms: Mapping[str, Arm],
        host_of: Mapping[str, int],
        hooks: Hooks,
    ) -> Attempt:
        if hooks.progress:
            hooks.progress(batch, "searching for each arm's capacity")
        outcomes: dict[str, SearchOutcome] = {}
        failures: dict[str, BaseException] = {}

        def search(name: str) -> None:
            try:
                outcomes[name] = self._search(
                    plan,
                    arms[name],
                    len(plan.hosts[host_of[name]]),
                    dithered(self.settings, dither_fraction(tag, name)),
                    summary=plan.workdir / f"{tag}-{name}.json",
                )
            except BaseException as err:  # re-raised in the batch's own thread below
                failures[name] = err

        threads = [threading.Thread(target=search, args=(n,), daemon=True) for n in arms]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise next(iter(failures.values()))
        problems = [
            f"arm {name}'s search stopped on {outcome.stopped_by}: "
            f"{outcome.probes[-1].note if outcome.probes else ''}".rstrip(": ")
            for name, outcome in outcomes.items()
            if outcome.spoiled or outcome.stopped_by == "min_rate"
        ]
        curves = {name: _curve(outcome, self.settings) for name, outcome in outcomes.items()}
        write_json(plan.workdir / f"{tag}{CAPACITY_SUFFIX}", {"arms": curves})
        rows = [
            (name, host_of[name], MAX_THROUGHPUT.name, outcome.max_rate_per_s)
            for name, outcome in outcomes.items()
        ]
        record: dict[str, object] = {
            "trial": batch.trial,
            "batch": batch.batch,
            "capacity": f"{tag}{CAPACITY_SUFFIX}",
            "stopped_by": {n: o.stopped_by for n, o in outcomes.items()},
            "load_s": {n: o.load_s for n, o in outcomes.items()},
        }
        return Attempt(rows=rows, per_request=pa.table({}), problems=problems, record=record)

    def _search(
        self, plan: RunPlan, arm: Arm, cpus: int, settings: SearchSettings, *, summary: Path
    ) -> SearchOutcome:
        """One arm's search with ``settings`` (its start dithered); the engine's summary of
        the whole run (every probe, its scheduling and run delay) is kept at ``summary``."""
        if plan.engine_spin_us == 0:
            # No spare CPU for the engines (every CPU is a host's): two engines and host
            # 0's arm on one CPU made 1-5% of sends over 1 ms late at 2,000/s, every batch
            # spoiled by the generator check; let them go where the scheduler finds room.
            os.sched_setaffinity(0, {c for host in plan.hosts for c in host})
        load_plan = engine.LoadPlan(
            targets=(("arm", arm.url),),
            trace=plan.trace,
            rate_per_s=settings.start_rate_per_s,
            duration_s=0,  # until stopped
            interval_ms=INTERVAL_MS,
            connections=CONNECTIONS,
            spin_us=plan.engine_spin_us,
            coalesce_us=plan.engine_coalesce_us,
            summary_path=summary,
        )
        with engine.ControlledLoad(load_plan) as load:
            return self._drive(load, settings, arm.cpu_ns, cpus)


def dither_fraction(tag: str, arm: str) -> float:
    """The fraction of a growth step by which one arm's search grid moves in one batch
    attempt (capacity/search.dithered): uniform on [0, 1), the same on every run of the
    experiment and independent between arms and batches. Without it the CI of 2026-11-29
    read A at 4,362/s and B at 500/s in all six batches of an A/B (each the low end of its
    grid cell), and the paired t had no spread to judge by. Pure."""
    digest = hashlib.blake2b(f"{tag}/{arm}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _curve(outcome: SearchOutcome, settings: SearchSettings) -> dict[str, Any]:
    return {
        "max_rate_per_s": outcome.max_rate_per_s,
        "stopped_by": outcome.stopped_by,
        "load_s": outcome.load_s,
        "slo_p99_ms": settings.slo_p99_ms,
        "probes": [
            {**asdict(p), "passed": probe_failure(p, settings) is None} for p in outcome.probes
        ],
    }
